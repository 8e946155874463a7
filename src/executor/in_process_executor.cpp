#include "executor/in_process_executor.h"

namespace kvasir {

InProcessExecutor::InProcessExecutor(std::unique_ptr<Worker> worker) : worker_(std::move(worker)) {
  thread_ = std::thread([this] { loop(); });
}

InProcessExecutor::~InProcessExecutor() {
  jobs_.close();
  if (thread_.joinable()) thread_.join();
}

StepFuture InProcessExecutor::execute(std::shared_ptr<const SchedulerOutput> so) {
  Job job{std::move(so), {}};
  StepFuture f = job.result.get_future();
  jobs_.push(std::move(job));
  return f;
}

void InProcessExecutor::loop() {
  // A failed step may leave the runner's state half-applied: later steps must not run on it.
  Status failed;
  while (auto job = jobs_.pop()) {
    if (!failed.ok()) {
      job->result.set_value(failed);
      continue;
    }
    StepResult r = worker_->execute_model(*job->so);
    if (!r.ok()) failed = r.status();
    job->result.set_value(std::move(r));
  }
}

}  // namespace kvasir
