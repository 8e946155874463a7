#include "executor/fault_injecting_executor.h"

#include <cstdlib>

#include "common/log.h"

namespace kvasir {

FaultInjectingExecutor::FaultInjectingExecutor(std::unique_ptr<Executor> inner, int64_t fail_after_steps)
    : inner_(std::move(inner)), fail_after_steps_(fail_after_steps) {}

void FaultInjectingExecutor::inject_next(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  fault_ = std::move(message);
}

StepFuture FaultInjectingExecutor::execute(std::shared_ptr<const SchedulerOutput> so, GrammarBitmaskFuture bitmask) {
  const int64_t n = num_submitted_.fetch_add(1);
  std::string fault;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fault_.empty() && fail_after_steps_ >= 0 && n >= fail_after_steps_) {
      fault_ = "injected test fault after " + std::to_string(fail_after_steps_) + " steps (" + kFaultAfterStepsEnv + ")";
    }
    fault = fault_;
  }
  if (fault.empty()) return inner_->execute(std::move(so), std::move(bitmask));
  // Steps already queued on the inner executor still finish first: the caller waits for futures
  // in submission order, so the failure lands where a device failure in this step would.
  // Nothing more reaches the inner executor: it answers any step it holds back now.
  inner_->flush();
  std::promise<StepResult> failed;
  failed.set_value(internal_error(fault));
  return failed.get_future();
}

std::unique_ptr<Executor> wrap_fault_injection_from_env(std::unique_ptr<Executor> inner) {
  const char* e = std::getenv(kFaultAfterStepsEnv);
  if (e == nullptr || *e == '\0') return inner;
  char* end = nullptr;
  const long long n = std::strtoll(e, &end, 10);
  if (end == nullptr || *end != '\0' || n < 0) {
    KVASIR_LOG_WARN("ignoring %s='%s' (not a non-negative integer)", kFaultAfterStepsEnv, e);
    return inner;
  }
  KVASIR_LOG_WARN("%s=%lld: test fault injection is on; the engine will fail after %lld steps", kFaultAfterStepsEnv, n, n);
  return std::make_unique<FaultInjectingExecutor>(std::move(inner), static_cast<int64_t>(n));
}

}  // namespace kvasir
