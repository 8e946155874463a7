// InProcessExecutor: runs a Worker (the ModelRunner) on its own thread, which owns the device:
// the engine thread queues steps and waits on futures, so it can schedule the next step while
// this one runs. Steps run one at a time in submission order. Must not reorder or drop a step.
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
  StepResult execute_model(const SchedulerOutput& so) override { return runner_->execute(so); }

 private:
  std::unique_ptr<ModelRunner> runner_;
};

class InProcessExecutor : public Executor {
 public:
  explicit InProcessExecutor(std::unique_ptr<Worker> worker);
  explicit InProcessExecutor(std::unique_ptr<ModelRunner> runner)
      : InProcessExecutor(std::make_unique<RunnerWorker>(std::move(runner))) {}
  // Runs the steps still queued, then stops the thread.
  ~InProcessExecutor() override;

  StepFuture execute(std::shared_ptr<const SchedulerOutput> so) override;

 private:
  struct Job {
    std::shared_ptr<const SchedulerOutput> so;
    std::promise<StepResult> result;
  };
  void loop();

  std::unique_ptr<Worker> worker_;
  BlockingQueue<Job> jobs_;
  std::thread thread_;
};

}  // namespace kvasir
