#include "executor/in_process_executor.h"

namespace kvasir {

InProcessExecutor::InProcessExecutor(std::unique_ptr<Worker> worker, Mode mode) : worker_(std::move(worker)) {
  if (mode == Mode::kWorkerThread) thread_ = std::thread([this] { loop(); });
}

InProcessExecutor::~InProcessExecutor() {
  jobs_.close();
  if (thread_.joinable()) thread_.join();
}

StepFuture InProcessExecutor::execute(std::shared_ptr<const SchedulerOutput> so, GrammarBitmaskFuture bitmask) {
  Job job{std::move(so), std::move(bitmask), {}};
  StepFuture f = job.result.get_future();
  if (!thread_.joinable()) {
    job.result.set_value(run(job));
    return f;
  }
  jobs_.push(std::move(job));
  return f;
}

// A failed step may leave the runner's state half-applied: later steps must not run on it.
StepResult InProcessExecutor::run(const Job& job) {
  if (!failed_.ok()) return failed_;
  StepResult r = worker_->execute_model(*job.so, job.bitmask);
  if (!r.ok()) failed_ = r.status();
  return r;
}

void InProcessExecutor::loop() {
  while (auto job = jobs_.pop()) job->result.set_value(run(*job));
}

}  // namespace kvasir
