// The steps of a tensor-parallel group: rank 0's engine drives every rank's runner through one
// message per step. BroadcastingWorker is rank 0's Worker: it sends the step (SchedulerOutput and
// its grammar masks, encoded by sched/scheduler_output_codec.h) to the other ranks, then runs its
// own runner; the collectives inside the forward pass keep the ranks in step. serve_steps is what
// the other ranks run: receive a step, run it, until rank 0 says stop. Any executor can drive a
// BroadcastingWorker (InProcessExecutor does, inline or on its thread), so the engine and the
// scheduler know nothing of ranks, and the runners nothing of the broadcast.
//
// Idle: a communicator op fails after its timeout (a hung peer), and the other ranks wait in one
// (the next step's broadcast) for as long as the engine has nothing to run. So while no step has
// gone out for kKeepAliveInterval, a thread of the BroadcastingWorker broadcasts a keep-alive
// message that serve_steps skips: an idle server keeps its group.
//
// Failure: a rank that dies or fails a step breaks the communicator, so the next broadcast or
// collective fails on every other rank; rank 0's step then fails (its requests end with that
// error) and every worker's serve_steps returns it, so the whole group ends instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "executor/executor.h"

namespace kvasir {

class BroadcastingWorker final : public Worker {
 public:
  // Well below any op timeout the groups use (60 s for a launched group), and rare enough to cost
  // nothing (one 8-byte broadcast).
  static constexpr std::chrono::milliseconds kKeepAliveInterval{5'000};

  // comm: rank 0 of the group; not owned, must outlive this worker.
  BroadcastingWorker(dist::Communicator& comm, std::unique_ptr<Worker> local,
                     std::chrono::milliseconds keep_alive_interval = kKeepAliveInterval);
  // Tells the other ranks to stop (when the group still works).
  ~BroadcastingWorker() override;

  // Waits for the step's grammar masks (the other ranks need them to sample alike), broadcasts
  // the step, then runs it here.
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override;

 private:
  dist::Communicator& comm_;
  std::unique_ptr<Worker> local_;
  void keep_alive();

  std::vector<uint8_t> message_;  // reused: the encoded step
  // Guards the communicator (a step and a keep-alive never interleave) and what follows.
  std::mutex mu_;
  Status failed_;
  std::chrono::milliseconds keep_alive_interval_;
  std::chrono::steady_clock::time_point last_sent_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread keeper_;  // sends the keep-alives
};

// Runs on ranks 1..n-1: executes every step rank 0 broadcasts, in order, until rank 0 stops the
// group (OK) or the group or a step fails (that Status).
Status serve_steps(dist::Communicator& comm, Worker& worker);

}  // namespace kvasir
