// Executor: the seam between the engine loop and the device. The engine hands it one
// SchedulerOutput per step and gets a future of the step's ModelRunnerOutput (or the Status that
// ended it), so the loop may schedule step N+1 while step N runs (async scheduling). Steps run
// strictly in submission order: a step may compute a token that the step before it sampled.
// Must not schedule, touch requests' text, or throw: failures are Status values in the future.
//
// Implementations: InProcessExecutor (one worker thread owns the runner and the device) and the
// FaultInjectingExecutor decorator for tests. Tensor parallelism attaches here without touching
// the engine: a TP executor broadcasts each SchedulerOutput (plain data, so it serializes for
// workers in other processes or on other hosts) to one Worker per GPU; every worker applies the
// same diff to its own InputBatch and runs its shard of the model (collectives inside the
// forward pass); all ranks sample the same tokens, and the executor answers with rank 0's output.
// With --distributed-executor-backend mp the engine's process runs no model at all: its Worker
// sends the step and receives model rank 0's output (executor/remote_worker.h).
#pragma once

#include <future>
#include <memory>

#include "common/status.h"
#include "sched/grammar_bitmask.h"
#include "sched/scheduler_output.h"

namespace kvasir {

using StepResult = StatusOr<ModelRunnerOutput>;
using StepFuture = std::future<StepResult>;

class Executor {
 public:
  virtual ~Executor() = default;
  // Queues one step and returns at once. The SchedulerOutput is shared, not copied: the caller
  // keeps it (to fold the result back) and must not change it. The future is always satisfied.
  // After a step fails, every later step fails with the same Status without running.
  virtual StepFuture execute(std::shared_ptr<const SchedulerOutput> so, GrammarBitmaskFuture bitmask) = 0;
  StepFuture execute(std::shared_ptr<const SchedulerOutput> so) { return execute(std::move(so), {}); }
  // The caller will wait for every step it has submitted before it submits another: an executor
  // that holds a step back to start the next one first (overlapped steps) answers it now. A
  // caller that never flushes still gets every answer, later.
  virtual void flush() {}
};

// What runs a step on one device: the ModelRunner (RunnerWorker) or a test's fake. Called from
// the executor's thread only, one step at a time, in order.
class Worker {
 public:
  virtual ~Worker() = default;
  virtual StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) = 0;
  // Overlapped steps (ModelRunner::launch / finish): launch_model starts a step and says whether
  // its answer still waits on the device (else it is ready now); finish_model answers the oldest
  // launched one; can_launch_behind says whether a step may start before the one before it is
  // answered (it reads that step's tokens on the device). Only where overlaps() says so.
  virtual bool overlaps() const { return false; }
  virtual bool can_launch_behind(const SchedulerOutput& so) const { return false; }
  virtual StatusOr<bool> launch_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) {
    return unimplemented("this worker runs each step to its end");
  }
  virtual StepResult finish_model() { return unimplemented("this worker runs each step to its end"); }
};

}  // namespace kvasir
