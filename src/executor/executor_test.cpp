// Executors: steps run in submission order on the worker thread while the caller goes on; a
// failed step fails every later one without running it; the fault decorator fails exactly the
// step it is told to, through the same future a real failure would use.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "executor/fault_injecting_executor.h"
#include "executor/in_process_executor.h"

namespace kvasir {
namespace {

// Answers each step with one output named after the step's first new request; can be held
// closed to prove that execute() does not wait for the step.
class FakeWorker : public Worker {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    std::vector<std::string> ran;
    std::thread::id thread;
    std::string fail_on;
  };
  explicit FakeWorker(Shared* s) : s_(s) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture&) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->cv.wait(lock, [&] { return s_->open; });
    const std::string id = so.scheduled_new_reqs.empty() ? "" : so.scheduled_new_reqs[0].req_id;
    s_->ran.push_back(id);
    s_->thread = std::this_thread::get_id();
    if (id == s_->fail_on) return internal_error("device fell over at " + id);
    ModelRunnerOutput out;
    out.outputs.push_back(RunnerRequestOutput{id, {static_cast<TokenId>(s_->ran.size())}, {}, {}});
    return out;
  }

 private:
  Shared* s_;
};

std::shared_ptr<const SchedulerOutput> step(const std::string& id) {
  auto so = std::make_shared<SchedulerOutput>();
  NewRequestData d;
  d.req_id = id;
  so->scheduled_new_reqs.push_back(d);
  return so;
}

TEST(InProcessExecutorTest, RunsStepsInOrderOnItsOwnThreadWithoutBlockingTheCaller) {
  FakeWorker::Shared s;
  s.open = false;
  InProcessExecutor ex(std::make_unique<FakeWorker>(&s));
  StepFuture a = ex.execute(step("a"));
  StepFuture b = ex.execute(step("b"));  // queued behind a; the caller was not held
  EXPECT_EQ(b.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.open = true;
  }
  s.cv.notify_all();
  StepResult rb = b.get();
  StepResult ra = a.get();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->outputs[0].req_id, "a");
  EXPECT_EQ(ra->outputs[0].sampled_token_ids[0], 1);
  EXPECT_EQ(rb->outputs[0].sampled_token_ids[0], 2);
  EXPECT_EQ(s.ran, (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(s.thread, std::this_thread::get_id());
}

TEST(InProcessExecutorTest, AFailedStepFailsEveryLaterStepWithoutRunningIt) {
  FakeWorker::Shared s;
  s.fail_on = "b";
  InProcessExecutor ex(std::make_unique<FakeWorker>(&s));
  StepFuture a = ex.execute(step("a"));
  StepFuture b = ex.execute(step("b"));
  StepFuture c = ex.execute(step("c"));
  EXPECT_TRUE(a.get().ok());
  StepResult rb = b.get();
  StepResult rc = c.get();
  ASSERT_FALSE(rb.ok());
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().message(), rb.status().message());
  EXPECT_EQ(s.ran, (std::vector<std::string>{"a", "b"}));
}

TEST(InProcessExecutorTest, InlineRunsEachStepOnTheCallersThreadBeforeReturning) {
  FakeWorker::Shared s;
  s.fail_on = "b";
  InProcessExecutor ex(std::make_unique<FakeWorker>(&s), InProcessExecutor::Mode::kInline);
  StepFuture a = ex.execute(step("a"));
  EXPECT_EQ(a.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(s.thread, std::this_thread::get_id());
  EXPECT_TRUE(a.get().ok());
  StepResult rb = ex.execute(step("b")).get();
  StepResult rc = ex.execute(step("c")).get();
  ASSERT_FALSE(rb.ok());
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().message(), rb.status().message());
  EXPECT_EQ(s.ran, (std::vector<std::string>{"a", "b"}));  // c never reached the worker
}

TEST(InProcessExecutorTest, DestructionRunsTheStepsStillQueued) {
  FakeWorker::Shared s;
  StepFuture last;
  {
    InProcessExecutor ex(std::make_unique<FakeWorker>(&s));
    for (const char* id : {"a", "b", "c"}) last = ex.execute(step(id));
  }
  EXPECT_TRUE(last.get().ok());
  EXPECT_EQ(s.ran.size(), 3u);
}

TEST(FaultInjectingExecutorTest, FailsTheStepAfterNAndEveryLaterOne) {
  FakeWorker::Shared s;
  FaultInjectingExecutor ex(std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(&s)), 2);
  StepFuture a = ex.execute(step("a"));
  StepFuture b = ex.execute(step("b"));
  StepFuture c = ex.execute(step("c"));
  StepFuture d = ex.execute(step("d"));
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  StepResult rc = c.get();
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.status().message().find(kFaultAfterStepsEnv), std::string::npos) << rc.status().message();
  EXPECT_FALSE(d.get().ok());
  EXPECT_EQ(s.ran, (std::vector<std::string>{"a", "b"}));  // the faulty steps never reached the worker
}

TEST(FaultInjectingExecutorTest, InjectNextFailsTheNextStepWithTheMessage) {
  FakeWorker::Shared s;
  FaultInjectingExecutor ex(std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(&s)));
  EXPECT_TRUE(ex.execute(step("a")).get().ok());
  ex.inject_next("gpu on fire");
  StepResult r = ex.execute(step("b")).get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "gpu on fire");
  EXPECT_EQ(ex.num_submitted(), 2);
}

TEST(FaultInjectingExecutorTest, EnvSwitchWrapsOnlyForANonNegativeInteger) {
  FakeWorker::Shared s;
  auto make = [&] { return std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(&s)); };
  ::unsetenv(kFaultAfterStepsEnv);
  EXPECT_EQ(dynamic_cast<FaultInjectingExecutor*>(wrap_fault_injection_from_env(make()).get()), nullptr);
  ::setenv(kFaultAfterStepsEnv, "-3", 1);
  EXPECT_EQ(dynamic_cast<FaultInjectingExecutor*>(wrap_fault_injection_from_env(make()).get()), nullptr);
  ::setenv(kFaultAfterStepsEnv, "1x", 1);
  EXPECT_EQ(dynamic_cast<FaultInjectingExecutor*>(wrap_fault_injection_from_env(make()).get()), nullptr);
  ::setenv(kFaultAfterStepsEnv, "0", 1);
  auto wrapped = wrap_fault_injection_from_env(make());
  ::unsetenv(kFaultAfterStepsEnv);
  ASSERT_NE(dynamic_cast<FaultInjectingExecutor*>(wrapped.get()), nullptr);
  EXPECT_FALSE(wrapped->execute(step("a")).get().ok());
  EXPECT_TRUE(s.ran.empty());
}

// An overlapping worker: records launches and finishes as "L<id>" / "F<id>", in order, and
// answers each step with its id.
class OverlapWorker : public Worker {
 public:
  struct Shared {
    std::mutex mu;
    std::vector<std::string> events;
    std::string fail_launch;
  };
  explicit OverlapWorker(Shared* s) : s_(s) {}
  StepResult execute_model(const SchedulerOutput&, const GrammarBitmaskFuture&) override {
    return internal_error("an overlapping worker is launched and finished, never executed");
  }
  bool overlaps() const override { return true; }
  // Steps named "host..." need the step before on the host; "ready..." end on the host.
  bool can_launch_behind(const SchedulerOutput& so) const override {
    return so.scheduled_new_reqs[0].req_id.rfind("host", 0) != 0;
  }
  StatusOr<bool> launch_model(const SchedulerOutput& so, const GrammarBitmaskFuture&) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    const std::string id = so.scheduled_new_reqs[0].req_id;
    s_->events.push_back("L" + id);
    if (id == s_->fail_launch) return internal_error("launch failed at " + id);
    pending_.push_back(id);
    return id.rfind("ready", 0) != 0 && id.rfind("host", 0) != 0;
  }
  StepResult finish_model() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    const std::string id = pending_.front();
    pending_.erase(pending_.begin());
    s_->events.push_back("F" + id);
    ModelRunnerOutput out;
    out.outputs.push_back(RunnerRequestOutput{id, {}, {}, {}});
    return out;
  }

 private:
  Shared* s_;
  std::vector<std::string> pending_;
};

std::string answer_of(StepFuture& f) {
  StepResult r = f.get();
  return r.ok() ? r->outputs[0].req_id : "error: " + r.status().message();
}

// The worker launches step N+1 before it answers step N; a flush answers the step it holds.
TEST(InProcessExecutorTest, OverlappingWorkerLaunchesTheNextStepBeforeAnsweringAndFlushAnswers) {
  OverlapWorker::Shared s;
  {
    InProcessExecutor ex(std::make_unique<OverlapWorker>(&s));
    StepFuture a = ex.execute(step("a"));
    StepFuture b = ex.execute(step("b"));
    EXPECT_EQ(answer_of(a), "a");
    ex.flush();  // nothing follows b: answer it
    EXPECT_EQ(answer_of(b), "b");
    StepFuture c = ex.execute(step("c"));
    ex.flush();
    EXPECT_EQ(answer_of(c), "c");
  }
  const std::vector<std::string> want = {"La", "Lb", "Fa", "Fb", "Lc", "Fc"};
  EXPECT_EQ(s.events, want);
}

// A caller that never flushes still gets its answer, after the hold limit.
TEST(InProcessExecutorTest, OverlappingWorkerAnswersAHeldStepWithoutAFlush) {
  OverlapWorker::Shared s;
  InProcessExecutor ex(std::make_unique<OverlapWorker>(&s));
  const auto t0 = std::chrono::steady_clock::now();
  StepFuture a = ex.execute(step("a"));
  EXPECT_EQ(answer_of(a), "a");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, InProcessExecutor::kHoldLimit);
}

// A step with grammar masks is launched only after the step before is answered (its masks wait
// for the caller's fold of that step).
TEST(InProcessExecutorTest, OverlappingWorkerAnswersFirstWhenTheNextStepHasGrammarMasks) {
  OverlapWorker::Shared s;
  {
    InProcessExecutor ex(std::make_unique<OverlapWorker>(&s));
    StepFuture a = ex.execute(step("a"));
    std::promise<std::shared_ptr<const GrammarBitmask>> masks;
    masks.set_value(std::make_shared<GrammarBitmask>());
    StepFuture b = ex.execute(step("b"), masks.get_future().share());
    EXPECT_EQ(answer_of(a), "a");
    ex.flush();
    EXPECT_EQ(answer_of(b), "b");
  }
  const std::vector<std::string> want = {"La", "Fa", "Lb", "Fb"};
  EXPECT_EQ(s.events, want);
}

// A step that needs the held step's tokens on the host gets it answered before it launches; a
// step that ended on the host is answered at once, not held for the next.
TEST(InProcessExecutorTest, OverlappingWorkerHoldsOnlyStepsLeftOnTheDevice) {
  OverlapWorker::Shared s;
  {
    InProcessExecutor ex(std::make_unique<OverlapWorker>(&s));
    StepFuture a = ex.execute(step("a"));
    StepFuture h = ex.execute(step("host1"));
    StepFuture r = ex.execute(step("ready1"));
    EXPECT_EQ(answer_of(a), "a");
    EXPECT_EQ(answer_of(h), "host1");
    EXPECT_EQ(answer_of(r), "ready1");  // no flush: answered without waiting for a next step
  }
  const std::vector<std::string> want = {"La", "Fa", "Lhost1", "Fhost1", "Lready1", "Fready1"};
  EXPECT_EQ(s.events, want);
}

// A failed launch fails the held step and every later one.
TEST(InProcessExecutorTest, OverlappingWorkerFailedLaunchFailsHeldAndLaterSteps) {
  OverlapWorker::Shared s;
  s.fail_launch = "b";
  InProcessExecutor ex(std::make_unique<OverlapWorker>(&s));
  StepFuture a = ex.execute(step("a"));
  StepFuture b = ex.execute(step("b"));
  StepFuture c = ex.execute(step("c"));
  ex.flush();
  EXPECT_EQ(answer_of(a), "error: launch failed at b");
  EXPECT_EQ(answer_of(b), "error: launch failed at b");
  EXPECT_EQ(answer_of(c), "error: launch failed at b");
}

}  // namespace
}  // namespace kvasir
