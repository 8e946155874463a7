// EngineCore with a scripted fake executor (the scheduler tests' fake runner, KV simulation
// included, on the executor's worker thread): async scheduling gives the same tokens and finish
// reasons as the synchronous loop, also under preemption, EOS, stop tokens, max_tokens and aborts;
// it really keeps a step in flight; a failed step ends every live request and kills the core.
#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include "executor/fault_injecting_executor.h"
#include "executor/in_process_executor.h"
#include "sched/scheduler_test_util.h"

namespace kvasir {
namespace {

using testing::FakeRunner;

constexpr TokenId kEos = 30;

// The fake runner as a Worker. A closed gate holds the worker before it runs a step, and the
// worker counts how many steps it was handed.
class FakeWorker : public Worker {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    int num_received = 0;
    int max_tokens_seen_past_finish = 0;
  };
  FakeWorker(const SchedulerConfig& c, Gate* gate) : runner_(c.num_blocks, c.block_size), gate_(gate) {}

  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture&) override {
    std::unique_lock<std::mutex> lock(gate_->mu);
    ++gate_->num_received;
    gate_->cv.notify_all();
    gate_->cv.wait(lock, [&] { return gate_->open; });
    lock.unlock();
    return runner_.execute(so);
  }

 private:
  FakeRunner runner_;
  Gate* gate_;
};

struct Result {
  std::vector<TokenId> tokens;
  std::optional<FinishReason> finish;
  std::string error;
};

class CoreRun {
 public:
  CoreRun(SchedulerConfig c, bool async, std::unique_ptr<Executor> executor = nullptr) : config_(c) {
    config_.async_scheduling = async;
    if (!executor) executor = std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(config_, &gate));
    core_ = std::make_unique<EngineCore>(config_, std::move(executor), metrics_, outputs_);
  }
  ~CoreRun() { core_->stop(); }

  void add(const std::string& id, int prompt_len, int max_tokens, SamplingParams sp = {}) {
    sp.max_tokens = max_tokens;
    RequestOptions ro;
    ro.eos_token_id = kEos;
    std::vector<TokenId> prompt;
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(100 + (i * 7 + static_cast<int>(id.size())) % 50);
    core_->submit(AddRequestCmd{std::make_unique<Request>(id, std::move(prompt), sp, ro)});
    results[id];
  }
  void start() { core_->start(); }
  EngineCore& core() { return *core_; }
  const EngineMetrics& metrics() const { return metrics_; }

  // Pops outputs until every added request finished (or the time-out fails the test).
  void wait_all() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (num_finished() < results.size()) {
      auto outs = outputs_.pop_for(std::chrono::milliseconds(100));
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "requests did not finish";
      if (!outs) continue;
      for (EngineCoreOutput& o : outs->outputs) take(o);
    }
  }
  // Pops until `id` has at least n tokens.
  void wait_tokens(const std::string& id, size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (results[id].tokens.size() < n) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      auto outs = outputs_.pop_for(std::chrono::milliseconds(100));
      if (outs) for (EngineCoreOutput& o : outs->outputs) take(o);
    }
  }

  std::map<std::string, Result> results;
  std::set<std::string> aborted;
  FakeWorker::Gate gate;

 private:
  void take(EngineCoreOutput& o) {
    if (aborted.count(o.req_id) != 0) {
      // Outputs of steps before the abort may still be queued; none may say it finished.
      EXPECT_FALSE(o.finished()) << o.req_id << " reported a finish after its abort";
      return;
    }
    Result& r = results[o.req_id];
    EXPECT_FALSE(r.finish.has_value()) << o.req_id << " got output after it finished";
    r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (o.finished()) {
      r.finish = o.finish_reason;
      r.error = o.error_message;
    }
  }
  size_t num_finished() const {
    size_t n = 0;
    for (const auto& [id, r] : results) n += r.finish.has_value();
    return n;
  }

  SchedulerConfig config_;
  EngineMetrics metrics_;
  BlockingQueue<EngineCoreOutputs> outputs_;
  std::unique_ptr<EngineCore> core_;
};

// A mixed workload: long and short prompts (chunked), EOS possible, stop tokens, min_tokens.
void add_workload(CoreRun& run) {
  for (int i = 0; i < 12; ++i) {
    SamplingParams sp;
    if (i % 3 == 1) sp.stop_token_ids = {44, 12};
    if (i % 4 == 2) sp.min_tokens = 5;
    if (i % 5 == 3) sp.ignore_eos = true;
    run.add("req-" + std::to_string(i), 3 + (i * 11) % 40, 2 + (i * 5) % 23, sp);
  }
}

std::map<std::string, Result> run_workload(const SchedulerConfig& c, bool async, int64_t* num_preemptions = nullptr) {
  CoreRun run(c, async);
  add_workload(run);
  run.start();
  run.wait_all();
  if (num_preemptions != nullptr) *num_preemptions = run.metrics().num_preemptions.load();
  return run.results;
}

void expect_same(const std::map<std::string, Result>& a, const std::map<std::string, Result>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [id, r] : a) {
    const Result& o = b.at(id);
    EXPECT_EQ(r.tokens, o.tokens) << id << " finish " << static_cast<int>(*r.finish) << " vs " << static_cast<int>(*o.finish);
    EXPECT_EQ(r.finish, o.finish) << id;
  }
}

TEST(EngineCoreTest, AsyncSchedulingGivesTheSameTokensAndFinishReasons) {
  const SchedulerConfig c = testing::small_config(128);
  const auto sync = run_workload(c, false);
  const auto async = run_workload(c, true);
  expect_same(sync, async);
  int by_eos_or_stop = 0;
  for (const auto& [id, r] : sync) by_eos_or_stop += r.finish == FinishReason::kStop;
  EXPECT_GT(by_eos_or_stop, 0) << "the workload should exercise EOS / stop tokens";
}

TEST(EngineCoreTest, AsyncSchedulingGivesTheSameTokensUnderPreemption) {
  // 12 blocks of 4 tokens for 12 requests of up to 60 tokens: preemption all along.
  const SchedulerConfig c = testing::small_config(12);
  int64_t sync_preemptions = 0, async_preemptions = 0;
  const auto sync = run_workload(c, false, &sync_preemptions);
  const auto async = run_workload(c, true, &async_preemptions);
  expect_same(sync, async);
  EXPECT_GT(sync_preemptions, 0);
  EXPECT_GT(async_preemptions, 0);
}

TEST(EngineCoreTest, MaxTokensIsExactWithAsyncScheduling) {
  CoreRun run(testing::small_config(), /*async=*/true);
  SamplingParams sp;
  sp.ignore_eos = true;
  run.add("a", 5, 7, sp);
  run.add("b", 9, 1, sp);
  run.start();
  run.wait_all();
  EXPECT_EQ(run.results["a"].tokens.size(), 7u);
  EXPECT_EQ(run.results["b"].tokens.size(), 1u);
  EXPECT_EQ(run.results["a"].finish, FinishReason::kLength);
}

TEST(EngineCoreTest, AsyncSchedulingSubmitsTheNextStepWhileOneRuns) {
  for (bool async : {false, true}) {
    SchedulerConfig c = testing::small_config();
    FakeWorker::Gate gate;
    gate.open = false;
    // The decorator with no fault set only counts submissions.
    auto counting = std::make_unique<FaultInjectingExecutor>(
        std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(c, &gate)));
    FaultInjectingExecutor* submitted = counting.get();
    CoreRun run(c, async, std::move(counting));
    SamplingParams sp;
    sp.ignore_eos = true;
    run.add("a", 4, 20, sp);
    run.start();
    {
      std::unique_lock<std::mutex> lock(gate.mu);
      gate.cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate.num_received >= 1; });
    }
    // The first step is held in the worker. Async: the loop schedules and queues the next one
    // without waiting; sync: it waits.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(async ? 5000 : 200);
    while (submitted->num_submitted() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(submitted->num_submitted(), async ? 2 : 1) << (async ? "async" : "sync");
    {
      std::lock_guard<std::mutex> lock(gate.mu);
      EXPECT_EQ(gate.num_received, 1);
      gate.open = true;
    }
    gate.cv.notify_all();
    run.wait_all();
    EXPECT_EQ(run.results["a"].tokens.size(), 20u);
  }
}

TEST(EngineCoreTest, AbortWhileAStepIsInFlightEmitsNothingMore) {
  for (bool async : {false, true}) {
    CoreRun run(testing::small_config(128), async);
    SamplingParams sp;
    sp.ignore_eos = true;
    run.add("a", 4, 400, sp);
    run.add("b", 6, 30, sp);
    run.start();
    run.wait_tokens("a", 3);
    run.core().submit(FinishRequestCmd{"a", RequestStatus::kFinishedAborted});
    // The core emits nothing for an abort: the caller already knows.
    run.aborted.insert("a");
    run.results.erase("a");
    run.wait_all();
    EXPECT_EQ(run.results["b"].tokens.size(), 30u);
    EXPECT_FALSE(run.core().dead());
  }
}

TEST(EngineCoreTest, AFailedStepEndsEveryLiveRequestWithAnError) {
  for (bool async : {false, true}) {
    SchedulerConfig c = testing::small_config();
    c.async_scheduling = async;
    FakeWorker::Gate gate;
    auto fault = std::make_unique<FaultInjectingExecutor>(
        std::make_unique<InProcessExecutor>(std::make_unique<FakeWorker>(c, &gate)), /*fail_after_steps=*/5);
    CoreRun run(c, async, std::move(fault));
    SamplingParams sp;
    sp.ignore_eos = true;
    run.add("a", 4, 100, sp);
    run.add("b", 4, 100, sp);
    run.start();
    run.wait_all();
    for (const char* id : {"a", "b"}) {
      EXPECT_EQ(run.results[id].finish, FinishReason::kError) << id;
      EXPECT_NE(run.results[id].error.find(kFaultAfterStepsEnv), std::string::npos) << run.results[id].error;
      EXPECT_LT(run.results[id].tokens.size(), 6u) << "at most one token per successful step";
    }
    EXPECT_TRUE(run.core().dead());
    EXPECT_EQ(run.core().num_steps(), 5);
    // A request that arrives after the fault is answered, not left hanging.
    run.add("late", 4, 3, sp);
    run.wait_all();
    EXPECT_EQ(run.results["late"].finish, FinishReason::kError);
  }
}

}  // namespace
}  // namespace kvasir
