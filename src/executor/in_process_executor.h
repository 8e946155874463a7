// InProcessExecutor: runs a Worker (the ModelRunner) in this process. With a worker thread (async
// scheduling) that thread owns the device: the engine thread queues steps and waits on futures,
// so it can schedule the next step while this one runs. Inline (the engine waits on every step
// anyway) execute() runs the step on the caller's thread and returns a ready future: no thread
// hand-off, which costs two wake-ups per step (+1% GPU idle in the 1000 x 1000/1000 run on an
// H200). Steps run one at a time in submission order. Must not reorder or drop a step.
#pragma once

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

 private:
  struct Job {
    std::shared_ptr<const SchedulerOutput> so;
    GrammarBitmaskFuture bitmask;
    std::promise<StepResult> result;
  };
  void loop();
  StepResult run(const Job& job);

  std::unique_ptr<Worker> worker_;
  Status failed_;  // the first failed step's Status; later steps fail with it without running
  BlockingQueue<Job> jobs_;
  std::thread thread_;
};

}  // namespace kvasir
