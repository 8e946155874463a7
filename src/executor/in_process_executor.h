// InProcessExecutor: runs a Worker (the ModelRunner) in this process. With a worker thread (async
// scheduling) that thread owns the device: the engine thread queues steps and waits on futures,
// so it can schedule the next step while this one runs. Inline (the engine waits on every step
// anyway) execute() runs the step on the caller's thread and returns a ready future: no thread
// hand-off, which costs two wake-ups per step (+1% GPU idle in the 1000 x 1000/1000 run on an
// H200). With overlapped steps (a worker thread and a Worker that overlaps()) the thread launches
// step N+1 before it answers step N, so the device never waits for the host between them: step
// N's read-back, the engine's fold of it and the scheduling of N+2 all run while N+1 computes.
// It holds a launched step whose answer waits on the device until the next step arrives (or the
// caller flushes); a step that cannot start behind it (can_launch_behind) gets it answered first,
// and a step that ended on the host is answered at once. Steps are answered in submission order.
// Must not reorder or drop a step.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <thread>

#include "common/blocking_queue.h"
#include "executor/executor.h"
#include "runner/model_runner.h"

namespace kvasir {

// The ModelRunner as a Worker.
class RunnerWorker : public Worker {
 public:
  explicit RunnerWorker(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override {
    return runner_->execute(so, bitmask);
  }
  bool overlaps() const override { return runner_->overlaps_steps(); }
  bool can_launch_behind(const SchedulerOutput& so) const override { return runner_->can_launch_behind(so); }
  StatusOr<bool> launch_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override {
    KVASIR_RETURN_IF_ERROR(runner_->launch(so, bitmask));
    return runner_->newest_on_device();
  }
  StepResult finish_model() override { return runner_->finish(); }

 private:
  std::unique_ptr<ModelRunner> runner_;
};

class InProcessExecutor : public Executor {
 public:
  enum class Mode { kWorkerThread, kInline };
  explicit InProcessExecutor(std::unique_ptr<Worker> worker, Mode mode = Mode::kWorkerThread);
  explicit InProcessExecutor(std::unique_ptr<ModelRunner> runner, Mode mode = Mode::kWorkerThread)
      : InProcessExecutor(std::make_unique<RunnerWorker>(std::move(runner)), mode) {}
  // Runs the steps still queued, then stops the thread.
  ~InProcessExecutor() override;

  using Executor::execute;
  StepFuture execute(std::shared_ptr<const SchedulerOutput> so, GrammarBitmaskFuture bitmask) override;
  void flush() override;

  // A launched step is held at most this long for the next one when nobody flushes.
  static constexpr std::chrono::milliseconds kHoldLimit{20};

 private:
  struct Job {
    std::shared_ptr<const SchedulerOutput> so;  // null: a flush
    GrammarBitmaskFuture bitmask;
    std::promise<StepResult> result;
  };
  void loop();
  void loop_overlapped();
  StepResult run(const Job& job);
  // Answers the oldest launched job.
  void finish_oldest(std::deque<Job>& launched);

  std::unique_ptr<Worker> worker_;
  Status failed_;  // the first failed step's Status; later steps fail with it without running
  BlockingQueue<Job> jobs_;
  std::thread thread_;
};

}  // namespace kvasir
