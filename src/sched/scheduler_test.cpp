#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include "sched/scheduler_test_util.h"
#include "sched/stop_check.h"

namespace kvasir {
namespace {

using testing::Harness;
using testing::small_config;
using testing::scheduled;
using testing::tokens;

TEST(Scheduler, FillsTheTokenBudgetAndChunksTheLastPrompt) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 10;
  Harness h(c);
  ASSERT_TRUE(h.add("a", tokens(4), 4).ok());
  ASSERT_TRUE(h.add("b", tokens(4, 200), 4).ok());
  ASSERT_TRUE(h.add("c", tokens(4, 300), 4).ok());
  const SchedulerOutput so = h.step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 10);
  EXPECT_EQ(scheduled(so, "a"), 4);
  EXPECT_EQ(scheduled(so, "b"), 4);
  EXPECT_EQ(scheduled(so, "c"), 2);
  ASSERT_EQ(so.scheduled_new_reqs.size(), 3u);
  EXPECT_EQ(h.outputs["a"].size(), 1u);
  EXPECT_EQ(h.outputs["c"].size(), 0u) << "a partial prefill samples nothing";
  const SchedulerOutput next = h.step();
  EXPECT_EQ(scheduled(next, "a"), 1);
  EXPECT_EQ(scheduled(next, "c"), 2);
  EXPECT_EQ(next.scheduled_new_reqs.size(), 0u);
  h.run_to_completion();
}

TEST(Scheduler, MaxNumSeqsCapsRunningRequests) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 2;
  Harness h(c);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(h.add(id, tokens(3), 2).ok());
  const SchedulerOutput so = h.step();
  EXPECT_EQ(so.num_scheduled_tokens.size(), 2u);
  EXPECT_EQ(h.sched.num_waiting_reqs(), 1);
  h.run_to_completion();
  EXPECT_EQ(h.finals.size(), 3u);
}

TEST(Scheduler, LongPromptIsChunkedAndSamplesOnlyAtItsEnd) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 10;
  Harness h(c);
  ASSERT_TRUE(h.add("long", tokens(25), 3).ok());
  EXPECT_EQ(scheduled(h.step(), "long"), 10);
  EXPECT_EQ(scheduled(h.step(), "long"), 10);
  EXPECT_TRUE(h.outputs["long"].empty());
  EXPECT_EQ(scheduled(h.step(), "long"), 5);
  EXPECT_EQ(h.outputs["long"].size(), 1u);
  h.run_to_completion();
  EXPECT_EQ(h.outputs["long"].size(), 3u);
  EXPECT_EQ(h.finals["long"].finish_reason, FinishReason::kLength);
}

TEST(Scheduler, LongPrefillThresholdCapsEachChunk) {
  SchedulerConfig c = small_config();
  c.long_prefill_token_threshold = 6;
  Harness h(c);
  ASSERT_TRUE(h.add("long", tokens(20), 1).ok());
  ASSERT_TRUE(h.add("short", tokens(3, 500), 1).ok());
  const SchedulerOutput so = h.step();
  EXPECT_EQ(scheduled(so, "long"), 6);
  EXPECT_EQ(scheduled(so, "short"), 3);
  h.run_to_completion();
}

// A running decode must get its token every step, even behind a prefill that could eat the whole
// budget (here a higher-priority long prompt that sorts ahead of it in the running list).
TEST(Scheduler, LongPromptNeverStallsRunningDecodes) {
  SchedulerConfig c = small_config(256);
  c.policy = SchedulingPolicy::kPriority;
  c.max_num_batched_tokens = 16;
  Harness h(c);
  RequestOptions low;
  low.priority = 5;
  ASSERT_TRUE(h.add("d1", tokens(3), 60, low).ok());
  ASSERT_TRUE(h.add("d2", tokens(3, 300), 60, low).ok());
  h.step();  // both prefilled, now decoding
  RequestOptions high;
  high.priority = 0;
  ASSERT_TRUE(h.add("long", tokens(200, 1000), 2, high).ok());
  int prefill_steps = 0;
  while (h.outputs["long"].empty()) {
    const SchedulerOutput so = h.step();
    EXPECT_EQ(scheduled(so, "d1"), 1);
    EXPECT_EQ(scheduled(so, "d2"), 1);
    EXPECT_LE(so.total_num_scheduled_tokens, 16);
    ++prefill_steps;
    ASSERT_LT(prefill_steps, 40);
  }
  EXPECT_EQ(prefill_steps, (200 + 13) / 14) << "the prompt still uses the rest of the budget";
  h.run_to_completion();
}

TEST(Scheduler, StopsOnEosStopTokenAndMaxTokens) {
  Harness h(small_config());
  h.runner.sample = [](const std::string& id, const std::vector<TokenId>& t) -> TokenId {
    return static_cast<TokenId>(t.size() % 2 == 0 ? 2 : 7);  // alternates 2 (EOS) and 7
  };
  RequestOptions eos;
  eos.eos_token_id = 2;
  ASSERT_TRUE(h.add("eos", tokens(4), 10, eos).ok());  // first output is 2
  SamplingParams ignore;
  ignore.ignore_eos = true;
  ASSERT_TRUE(h.add("ignore", tokens(4), 5, eos, ignore).ok());
  SamplingParams min;
  min.min_tokens = 3;
  ASSERT_TRUE(h.add("min", tokens(4), 10, eos, min).ok());
  SamplingParams stop;
  stop.stop_token_ids = {7};
  ASSERT_TRUE(h.add("stop", tokens(4), 10, {}, stop).ok());
  h.run_to_completion();
  EXPECT_EQ(h.outputs["eos"], (std::vector<TokenId>{2}));
  EXPECT_EQ(h.finals["eos"].finish_reason, FinishReason::kStop);
  EXPECT_FALSE(h.finals["eos"].stop_token_id.has_value());
  EXPECT_EQ(h.outputs["ignore"].size(), 5u);
  EXPECT_EQ(h.finals["ignore"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.outputs["min"], (std::vector<TokenId>{2, 7, 2}));  // EOS ignored below min_tokens
  EXPECT_EQ(h.finals["min"].finish_reason, FinishReason::kStop);
  EXPECT_EQ(h.outputs["stop"], (std::vector<TokenId>{2, 7}));
  EXPECT_EQ(h.finals["stop"].stop_token_id, 7);
  EXPECT_EQ(h.finals["stop"].num_prompt_tokens, 4);
}

TEST(StopCheck, MaxModelLenEndsARequest) {
  SamplingParams sp;
  sp.max_tokens = 100;
  Request r("r", tokens(9), sp);
  r.append_output_token(1);
  EXPECT_FALSE(check_stop(r, 11));
  r.append_output_token(1);
  EXPECT_TRUE(check_stop(r, 11));
  EXPECT_EQ(r.status(), RequestStatus::kFinishedLength);
}

TEST(Scheduler, AdmissionRejectsBadRequests) {
  Harness h(small_config(5));  // 4 blocks of 4 tokens
  ASSERT_TRUE(h.add("a", tokens(4), 4).ok());
  EXPECT_EQ(h.add("a", tokens(4), 4).code(), StatusCode::kInvalidArgument);
  const Status big = h.add("big", tokens(17), 1);
  EXPECT_EQ(big.code(), StatusCode::kOutOfRange);
  EXPECT_NE(big.message().find("KV blocks"), std::string::npos) << big.message();
  EXPECT_EQ(h.sched.num_waiting_reqs(), 1);
  h.run_to_completion();
}

// The request rules are the engine's RequestValidator's; past it they are invariants.
TEST(SchedulerDeathTest, RequestsThatBreakTheValidatorsRulesAbort) {
  Harness h(small_config(5));
  EXPECT_DEATH((void)h.add("empty", {}, 4), "empty prompt");
  EXPECT_DEATH((void)h.add("neg", {1, -1}, 4), "negative prompt token id");
  EXPECT_DEATH((void)h.add("zero", tokens(4), 0), "max_tokens < 1");
  EXPECT_DEATH((void)h.add("toolong", tokens(500), 13), "max_model_len");
}

TEST(Scheduler, PrefixHitsAreCappedBelowTheLastPromptToken) {
  Harness h(small_config());
  ASSERT_TRUE(h.add("first", tokens(8), 1).ok());
  h.run_to_completion();
  ASSERT_TRUE(h.add("same", tokens(8), 1).ok());
  ASSERT_TRUE(h.add("longer", tokens(9), 1).ok());
  const SchedulerOutput so = h.step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 2u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 4);
  EXPECT_EQ(scheduled(so, "same"), 4);
  EXPECT_EQ(so.scheduled_new_reqs[1].num_computed_tokens, 8);
  EXPECT_EQ(scheduled(so, "longer"), 1);
  EXPECT_EQ(h.finals["same"].num_cached_tokens, 4);
  EXPECT_EQ(h.finals["longer"].num_cached_tokens, 8);
  EXPECT_EQ(h.last_stats.prefix_cache_hits, 12);
  EXPECT_EQ(h.last_stats.prefix_cache_queries, 8 + 8 + 9);
  h.run_to_completion();
}

TEST(Scheduler, FcfsAdmitsInArrivalOrder) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 1;
  Harness h(c);
  for (const char* id : {"x", "y", "z"}) ASSERT_TRUE(h.add(id, tokens(2), 1).ok());
  std::vector<std::string> order;
  while (h.sched.has_unfinished_requests()) {
    for (const NewRequestData& d : h.step().scheduled_new_reqs) order.push_back(d.req_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"x", "y", "z"}));
}

TEST(Scheduler, PriorityPolicyAdmitsByPriorityThenArrival) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 1;
  c.policy = SchedulingPolicy::kPriority;
  Harness h(c);
  auto opt = [](int prio, double t) {
    RequestOptions o;
    o.priority = prio;
    o.arrival_time = t;
    return o;
  };
  ASSERT_TRUE(h.add("late-low", tokens(2), 1, opt(2, 1.0)).ok());
  ASSERT_TRUE(h.add("high", tokens(2), 1, opt(0, 3.0)).ok());
  ASSERT_TRUE(h.add("early-low", tokens(2), 1, opt(2, 0.5)).ok());
  std::vector<std::string> order;
  while (h.sched.has_unfinished_requests()) {
    for (const NewRequestData& d : h.step().scheduled_new_reqs) order.push_back(d.req_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"high", "early-low", "late-low"}));
}

TEST(Scheduler, AbortWorksInEveryState) {
  SchedulerConfig c = small_config(9);  // 8 blocks of 4 tokens
  c.max_num_batched_tokens = 8;
  Harness h(c);
  ASSERT_TRUE(h.add("decoding", tokens(3), 50).ok());
  ASSERT_TRUE(h.add("prefilling", tokens(16, 200), 50).ok());
  ASSERT_TRUE(h.add("waiting", tokens(4, 300), 50).ok());
  h.step();  // decoding: 3 tokens; prefilling: 5 of 16
  ASSERT_EQ(h.sched.get_request("decoding")->num_output_tokens(), 1);
  ASSERT_EQ(h.sched.get_request("waiting")->status(), RequestStatus::kWaiting);
  EXPECT_TRUE(h.sched.abort_request("waiting"));
  EXPECT_FALSE(h.sched.abort_request("waiting"));
  EXPECT_FALSE(h.sched.abort_request("never-added"));
  const int free_before = h.sched.kv_cache_manager().get_num_free_blocks();
  EXPECT_TRUE(h.sched.abort_request("prefilling"));
  EXPECT_EQ(h.sched.kv_cache_manager().get_num_free_blocks(), free_before + 2) << "freed at once";
  h.sched.check_invariants();
  const SchedulerOutput so = h.step();
  EXPECT_EQ(so.finished_req_ids, (std::vector<std::string>{"prefilling"}))
      << "the runner hears of aborted requests it held, only those";
  EXPECT_TRUE(h.sched.abort_request("decoding"));
  EXPECT_TRUE(h.finals.empty()) << "aborts emit no output";
  h.run_to_completion();
}

TEST(Scheduler, AbortBetweenScheduleAndUpdateDropsTheResult) {
  Harness h(small_config());
  ASSERT_TRUE(h.add("a", tokens(4), 5).ok());
  const SchedulerOutput so = h.sched.schedule();
  const ModelRunnerOutput ro = h.runner.execute(so);
  EXPECT_TRUE(h.sched.abort_request("a"));
  const EngineCoreOutputs outs = h.sched.update_from_output(so, ro);
  EXPECT_TRUE(outs.outputs.empty());
  h.sched.check_invariants();
  h.run_to_completion();
}

TEST(Scheduler, FinishRequestEndsWithStopForStopStrings) {
  Harness h(small_config());
  ASSERT_TRUE(h.add("a", tokens(4), 20).ok());
  h.step();
  EXPECT_TRUE(h.sched.finish_request("a", RequestStatus::kFinishedStopped));
  EXPECT_FALSE(h.sched.has_unfinished_requests());
  EXPECT_EQ(h.sched.schedule().finished_req_ids, (std::vector<std::string>{"a"}));
}

TEST(Scheduler, LogprobsPassThroughAndAreCutWithTheTokens) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 8;
  Scheduler s(c);
  SamplingParams sp;
  sp.max_tokens = 10;
  RequestOptions eos;
  eos.eos_token_id = 2;
  ASSERT_TRUE(s.add_request(std::make_unique<Request>("a", tokens(12), sp, eos)).ok());
  SchedulerOutput so = s.schedule();
  ModelRunnerOutput ro;
  ro.outputs.push_back({"a", {}, std::nullopt, LogprobsLists{8, 1, {}, {}, {}}});
  EngineCoreOutputs out = s.update_from_output(so, ro);
  ASSERT_EQ(out.outputs.size(), 1u);
  EXPECT_TRUE(out.outputs[0].new_token_ids.empty());
  EXPECT_EQ(out.outputs[0].new_prompt_logprobs->num_rows, 8);
  EXPECT_FALSE(out.outputs[0].finished());

  so = s.schedule();
  LogprobsLists lp{3, 2, {5, 6, 2, 3, 9, 9}, {-.1f, -.2f, -.3f, -.4f, -.5f, -.6f}, {1, 1, 1}};
  ro.outputs = {{"a", {5, 2, 9}, lp, std::nullopt}};  // three tokens at once, as speculation would
  out = s.update_from_output(so, ro);
  ASSERT_EQ(out.outputs.size(), 1u);
  const EngineCoreOutput& o = out.outputs[0];
  EXPECT_EQ(o.new_token_ids, (std::vector<TokenId>{5, 2})) << "tokens after EOS are dropped";
  ASSERT_TRUE(o.new_logprobs.has_value());
  EXPECT_EQ(o.new_logprobs->num_rows, 2);
  EXPECT_EQ(o.new_logprobs->token_ids, (std::vector<TokenId>{5, 6, 2, 3}));
  EXPECT_EQ(o.new_logprobs->ranks.size(), 2u);
  EXPECT_EQ(o.finish_reason, FinishReason::kStop);
  EXPECT_EQ(o.num_prompt_tokens, 12);
  EXPECT_FALSE(s.has_unfinished_requests());
  s.check_invariants();
}

TEST(Scheduler, EmptyStepIsHarmless) {
  Harness h(small_config());
  const SchedulerOutput so = h.step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 0);
  EXPECT_FALSE(h.sched.has_unfinished_requests());
}

}  // namespace
}  // namespace kvasir
