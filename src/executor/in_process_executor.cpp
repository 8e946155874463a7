#include "executor/in_process_executor.h"

namespace kvasir {

InProcessExecutor::InProcessExecutor(std::unique_ptr<Worker> worker, Mode mode) : worker_(std::move(worker)) {
  if (mode == Mode::kWorkerThread) {
    thread_ = worker_->overlaps() ? std::thread([this] { loop_overlapped(); }) : std::thread([this] { loop(); });
  }
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

void InProcessExecutor::flush() {
  if (thread_.joinable() && worker_->overlaps()) jobs_.push(Job{});
}

void InProcessExecutor::loop() {
  while (auto job = jobs_.pop()) {
    if (job->so) job->result.set_value(run(*job));
  }
}

void InProcessExecutor::finish_oldest(std::deque<Job>& launched) {
  Job& job = launched.front();
  StepResult r = failed_.ok() ? worker_->finish_model() : StepResult(failed_);
  if (!r.ok() && failed_.ok()) failed_ = r.status();
  job.result.set_value(std::move(r));
  launched.pop_front();
}

// Launch step N+1, then answer step N: the worker reads N's tokens back while N+1 computes.
void InProcessExecutor::loop_overlapped() {
  std::deque<Job> launched;
  for (;;) {
    std::optional<Job> job = launched.empty() ? jobs_.pop() : jobs_.pop_for(kHoldLimit);
    if (!job) {
      if (launched.empty()) return;  // closed and drained
      finish_oldest(launched);        // nothing came (or closed): answer what is held
      continue;
    }
    if (!job->so) {  // flush: the caller waits for everything submitted
      while (!launched.empty()) finish_oldest(launched);
      continue;
    }
    if (!failed_.ok()) {
      while (!launched.empty()) finish_oldest(launched);
      job->result.set_value(failed_);
      continue;
    }
    // A step that cannot start behind the held one (it needs its tokens on the host) lets it be
    // answered first, so that answer does not wait for this step too. A step with grammar masks
    // waits for them before it samples, and they wait for the caller's fold of the step before.
    if (!launched.empty() && (job->bitmask.valid() || !worker_->can_launch_behind(*job->so))) {
      while (!launched.empty()) finish_oldest(launched);
    }
    const StatusOr<bool> held = worker_->launch_model(*job->so, job->bitmask);
    if (!held.ok()) {
      // The runner's state is unspecified now: what was launched before fails with this step.
      failed_ = held.status();
      while (!launched.empty()) finish_oldest(launched);
      job->result.set_value(failed_);
      continue;
    }
    launched.push_back(std::move(*job));
    if (launched.size() > 1) finish_oldest(launched);
    if (!*held) finish_oldest(launched);  // its answer is ready: nothing to overlap it with
  }
}

}  // namespace kvasir
