// FaultInjectingExecutor: a decorator that makes steps fail as a broken device would, for tests
// and for the test-only $KVASIR_TEST_FAULT_AFTER_STEPS switch. The engine loop has no fault code
// of its own: it sees a failed step exactly as it would see a real one. Never used in production
// unless that variable is set.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "executor/executor.h"

namespace kvasir {

// $KVASIR_TEST_FAULT_AFTER_STEPS=N (N >= 0): the step after N steps fails; every unfinished
// request then ends with an error and the engine is dead (README.md, "Engine faults").
inline constexpr const char* kFaultAfterStepsEnv = "KVASIR_TEST_FAULT_AFTER_STEPS";

class FaultInjectingExecutor : public Executor {
 public:
  // fail_after_steps >= 0: the step submitted after that many fails (and so do all later ones);
  // -1: only inject_next() causes faults.
  explicit FaultInjectingExecutor(std::unique_ptr<Executor> inner, int64_t fail_after_steps = -1);

  // The next step submitted fails with this message, and so does every later one. Any thread.
  void inject_next(std::string message);

  using Executor::execute;
  StepFuture execute(std::shared_ptr<const SchedulerOutput> so, GrammarBitmaskFuture bitmask) override;
  void flush() override { inner_->flush(); }
  int64_t num_submitted() const { return num_submitted_.load(); }

 private:
  std::unique_ptr<Executor> inner_;
  int64_t fail_after_steps_;
  std::atomic<int64_t> num_submitted_{0};
  std::mutex mu_;
  std::string fault_;  // set once a fault fired (or was injected): later steps fail the same way
};

// Wraps `inner` in a FaultInjectingExecutor when $KVASIR_TEST_FAULT_AFTER_STEPS holds a
// non-negative integer (logging a warning), ignores (with a warning) any other value, and
// returns `inner` unchanged when the variable is unset. Read once, at engine construction.
std::unique_ptr<Executor> wrap_fault_injection_from_env(std::unique_ptr<Executor> inner);

}  // namespace kvasir
