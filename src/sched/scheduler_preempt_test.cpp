// Scheduler under KV pressure: preemption and resume, requests that can never fit, and a
// randomized workload checked against an unconstrained run.
#include <gtest/gtest.h>

#include <random>

#include "sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace kvasir {
namespace {

using testing::Harness;
using testing::small_config;
using testing::tokens;

TEST(SchedulerPreempt, PreemptsTheLatestRequestAndResumesItWithTheSameOutput) {
  SchedulerConfig c = small_config(7);  // 6 blocks of 4 tokens
  Harness h(c);
  ASSERT_TRUE(h.add("first", tokens(6), 10).ok());
  ASSERT_TRUE(h.add("second", tokens(6, 200), 10).ok());
  bool saw_preemption = false;
  bool saw_resume = false;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 200);
    const SchedulerOutput so = h.step();
    for (const std::string& id : so.preempted_req_ids) {
      EXPECT_EQ(id, "second") << "the latest arrival is the victim";
      saw_preemption = true;
      const Request* r = h.sched.get_request(id);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status(), RequestStatus::kPreempted);
      EXPECT_EQ(r->num_computed_tokens(), 0);
      EXPECT_EQ(r->num_preemptions(), 1);
      EXPECT_TRUE(h.sched.kv_cache_manager().get_block_ids(*r).empty());
      EXPECT_TRUE(so.scheduled_new_reqs.empty()) << "no admissions in a step that preempted";
    }
    for (const CachedRequestData& d : so.scheduled_cached_reqs)
      saw_resume |= d.resumed_from_preemption;
  }
  h.step();
  EXPECT_TRUE(saw_preemption);
  EXPECT_TRUE(saw_resume);
  EXPECT_GE(h.last_stats.num_preemptions, 1);

  Harness roomy(small_config(64));
  ASSERT_TRUE(roomy.add("first", tokens(6), 10).ok());
  ASSERT_TRUE(roomy.add("second", tokens(6, 200), 10).ok());
  roomy.run_to_completion();
  EXPECT_EQ(h.outputs, roomy.outputs) << "preemption must not change what is generated";
  EXPECT_EQ(roomy.last_stats.num_preemptions, 0);
}

TEST(SchedulerPreempt, PriorityPolicyPreemptsTheLowestPriority) {
  SchedulerConfig c = small_config(7);
  c.policy = SchedulingPolicy::kPriority;
  Harness h(c);
  RequestOptions low;
  low.priority = 9;
  RequestOptions high;
  high.priority = 1;
  high.arrival_time = 5.0;  // arrives later but matters more
  ASSERT_TRUE(h.add("low", tokens(6), 10, low).ok());
  ASSERT_TRUE(h.add("high", tokens(6, 200), 10, high).ok());
  std::vector<std::string> victims;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 200);
    const SchedulerOutput so = h.step();
    victims.insert(victims.end(), so.preempted_req_ids.begin(), so.preempted_req_ids.end());
  }
  ASSERT_FALSE(victims.empty());
  for (const std::string& v : victims) EXPECT_EQ(v, "low");
}

TEST(SchedulerPreempt, AbortOfAPreemptedRequest) {
  Harness h(small_config(7));
  ASSERT_TRUE(h.add("first", tokens(6), 10).ok());
  ASSERT_TRUE(h.add("second", tokens(6, 200), 10).ok());
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 200);
    const SchedulerOutput so = h.step();
    if (!so.preempted_req_ids.empty()) break;
  }
  ASSERT_EQ(h.sched.get_request("second")->status(), RequestStatus::kPreempted);
  EXPECT_TRUE(h.sched.abort_request("second"));
  h.sched.check_invariants();
  EXPECT_EQ(h.sched.schedule().finished_req_ids, (std::vector<std::string>{"second"}));
}

TEST(SchedulerPreempt, ARequestThatCanNeverFitEndsWithAnError) {
  Harness h(small_config(5));  // 4 blocks = 16 tokens of KV in all
  ASSERT_TRUE(h.add("huge", tokens(10), 40).ok());
  h.run_to_completion(100);
  ASSERT_TRUE(h.finals.count("huge"));
  const EngineCoreOutput& f = h.finals["huge"];
  EXPECT_EQ(f.finish_reason, FinishReason::kError);
  EXPECT_NE(f.error_message.find("KV cache"), std::string::npos) << f.error_message;
  EXPECT_EQ(h.outputs["huge"].size(), 7u) << "it generated until the cache was full";
}

TEST(SchedulerPreempt, OversizedRequestFailsWhileOthersFinish) {
  Harness h(small_config(5));
  ASSERT_TRUE(h.add("huge", tokens(10), 40).ok());
  ASSERT_TRUE(h.add("small", tokens(2, 300), 3).ok());
  h.run_to_completion(200);
  EXPECT_EQ(h.finals["huge"].finish_reason, FinishReason::kError);
  EXPECT_EQ(h.finals["small"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.outputs["small"].size(), 3u);
}

struct Arrival {
  std::string id;
  std::vector<TokenId> prompt;
  int max_tokens;
  int arrive_step;
  int abort_step;  // -1: never
};

std::vector<Arrival> random_workload(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  auto pick = [&](int k) { return static_cast<int>(rng() % static_cast<unsigned>(k)); };
  std::vector<Arrival> out;
  for (int i = 0; i < n; ++i) {
    Arrival a;
    a.id = "r" + std::to_string(i);
    a.prompt = tokens(4 * pick(4), 1000 * pick(3));  // shared prefixes for cache hits
    const int extra = 1 + pick(30);
    for (int j = 0; j < extra; ++j) a.prompt.push_back(pick(50));
    a.max_tokens = 1 + pick(24);
    a.arrive_step = pick(60);
    a.abort_step = pick(5) == 0 ? a.arrive_step + pick(30) : -1;
    out.push_back(std::move(a));
  }
  return out;
}

// Runs a workload; returns outputs of the requests that were not aborted.
std::map<std::string, std::vector<TokenId>> run_workload(const SchedulerConfig& c,
                                                         const std::vector<Arrival>& work,
                                                         bool with_aborts, int64_t* preemptions) {
  Harness h(c);
  for (int step = 0; step < 4000; ++step) {
    for (const Arrival& a : work) {
      if (a.arrive_step == step) {
        EXPECT_TRUE(h.add(a.id, a.prompt, a.max_tokens).ok());
      }
      if (with_aborts && a.abort_step == step) h.sched.abort_request(a.id);
    }
    if (step > 100 && !h.sched.has_unfinished_requests()) break;
    h.step();
  }
  h.run_to_completion(4200);
  if (preemptions) *preemptions = h.last_stats.num_preemptions;
  std::map<std::string, std::vector<TokenId>> out;
  for (const Arrival& a : work) {
    if (with_aborts && a.abort_step >= 0) continue;
    EXPECT_TRUE(h.finals.count(a.id)) << a.id << " never finished";
    EXPECT_EQ(h.finals[a.id].finish_reason, FinishReason::kLength) << a.id;
    out[a.id] = h.outputs[a.id];
  }
  return out;
}

TEST(SchedulerPreempt, RandomizedTinyPoolMatchesUnconstrainedRun) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    const std::vector<Arrival> work = random_workload(seed, 40);
    SchedulerConfig tiny = small_config(20);  // 19 blocks * 4 = 76 tokens: constant preemption
    tiny.max_num_batched_tokens = 24;
    tiny.long_prefill_token_threshold = seed % 2 == 0 ? std::optional<int>(8) : std::nullopt;
    tiny.policy = seed % 2 == 0 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
    int64_t preemptions = 0;
    const auto constrained = run_workload(tiny, work, true, &preemptions);
    EXPECT_GT(preemptions, 0) << "seed " << seed << " should exercise preemption";
    SchedulerConfig roomy = small_config(1024);
    roomy.enable_prefix_caching = false;
    const auto reference = run_workload(roomy, work, false, nullptr);
    for (const auto& [id, toks] : constrained) {
      EXPECT_EQ(toks, reference.at(id)) << "seed " << seed << " request " << id;
    }
  }
}

// Async scheduling (one step always in flight, its tokens counted as placeholders): the same
// tokens as the synchronous roomy run, with constant preemption, prefix hits and chunking, and
// every invariant checked after each schedule and each fold.
TEST(SchedulerPreempt, AsyncSchedulingTinyPoolMatchesUnconstrainedRun) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    const std::vector<Arrival> work = random_workload(seed, 40);
    SchedulerConfig tiny = small_config(20);
    tiny.max_num_batched_tokens = 24;
    tiny.long_prefill_token_threshold = seed % 2 == 0 ? std::optional<int>(8) : std::nullopt;
    tiny.policy = seed % 2 == 0 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
    tiny.async_scheduling = true;
    int64_t preemptions = 0;
    const auto constrained = run_workload(tiny, work, true, &preemptions);
    EXPECT_GT(preemptions, 0) << "seed " << seed << " should exercise preemption";
    SchedulerConfig roomy = small_config(1024);
    roomy.enable_prefix_caching = false;
    const auto reference = run_workload(roomy, work, false, nullptr);
    for (const auto& [id, toks] : constrained) {
      EXPECT_EQ(toks, reference.at(id)) << "seed " << seed << " request " << id;
    }
  }
}

// Concurrent partial prefills (N prompts cut short per step, M long ones) under constant
// preemption, synchronous and async: the same tokens as the roomy unlimited run.
TEST(SchedulerPreempt, PartialPrefillLimitsTinyPoolMatchUnconstrainedRun) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    const std::vector<Arrival> work = random_workload(seed, 40);
    SchedulerConfig tiny = small_config(20);
    tiny.max_num_batched_tokens = 24;
    tiny.long_prefill_token_threshold = 8;
    tiny.max_num_partial_prefills = 2 + static_cast<int>(seed % 2);
    tiny.max_long_partial_prefills = 1;
    tiny.policy = seed <= 2 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
    tiny.async_scheduling = seed % 2 == 0;
    int64_t preemptions = 0;
    const auto constrained = run_workload(tiny, work, true, &preemptions);
    EXPECT_GT(preemptions, 0) << "seed " << seed << " should exercise preemption";
    SchedulerConfig roomy = small_config(1024);
    roomy.enable_prefix_caching = false;
    const auto reference = run_workload(roomy, work, false, nullptr);
    for (const auto& [id, toks] : constrained) {
      EXPECT_EQ(toks, reference.at(id)) << "seed " << seed << " request " << id;
    }
  }
}

}  // namespace
}  // namespace kvasir
