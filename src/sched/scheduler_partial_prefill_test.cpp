// vLLM's concurrent partial prefills: at most max_num_partial_prefills prompts left unfinished by
// a step, at most max_long_partial_prefills long ones in it, the budget split between them, and
// vLLM's config rules with its messages.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace kvasir {
namespace {

using testing::Harness;
using testing::small_config;
using testing::scheduled;
using testing::tokens;

// What one step did to the prompts: how many it left unfinished and how many of its prefills had
// more than `threshold` tokens left when it began.
struct PrefillCounts {
  int partial = 0;
  int long_ = 0;
};

PrefillCounts step_and_count(Harness& h, int threshold) {
  std::map<std::string, int> remaining;  // prompt tokens left before the step
  for (const Request* r : h.sched.running()) {
    remaining[r->req_id()] = r->num_prompt_tokens() - std::min(r->num_computed_tokens(), r->num_prompt_tokens());
  }
  // Waiting prompts have computed nothing (no preemption in these tests, no shared prefixes).
  const SchedulerOutput so = h.step();
  PrefillCounts c;
  for (const auto& [id, n] : so.num_scheduled_tokens) {
    const Request* r = h.sched.get_request(id);
    const int left = remaining.count(id) ? remaining[id] : (r ? r->num_prompt_tokens() : n);
    if (left <= 0) continue;  // a decode
    if (n < left) ++c.partial;
    if (left > threshold) ++c.long_;
  }
  return c;
}

SchedulerConfig partial_config(int max_partial, int max_long, int threshold) {
  SchedulerConfig c = small_config(512);
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 40;
  c.long_prefill_token_threshold = threshold;
  c.max_num_partial_prefills = max_partial;
  c.max_long_partial_prefills = max_long;
  return c;
}

TEST(PartialPrefills, AtMostNPromptsArePartiallyPrefilledPerStep) {
  // Chunks of at most 6 tokens (the threshold) out of a 40-token budget: without the limit a
  // step cuts up to six prompts short.
  Harness h(partial_config(2, 2, 6));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(h.add("p" + std::to_string(i), tokens(30, 100 * i), 2).ok());
  int max_partial = 0;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 200);
    const PrefillCounts c = step_and_count(h, 6);
    EXPECT_LE(c.partial, 2) << "step " << h.num_steps;
    EXPECT_LE(c.long_, 2) << "step " << h.num_steps;
    max_partial = std::max(max_partial, c.partial);
  }
  EXPECT_EQ(max_partial, 2);
  h.run_to_completion();
  EXPECT_EQ(h.finals.size(), 6u);
}

TEST(PartialPrefills, WithoutTheLimitTheSameLoadCutsMorePromptsShort) {
  // The control for the test above: N = 1 is vLLM's default, no concurrency limit.
  Harness h(partial_config(1, 1, 6));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(h.add("p" + std::to_string(i), tokens(30, 100 * i), 2).ok());
  EXPECT_GT(step_and_count(h, 6).partial, 2);
  h.run_to_completion();
}

TEST(PartialPrefills, AtMostMLongPrefillsAndShortPromptsPassLongOnes) {
  SchedulerConfig c = partial_config(3, 1, 8);
  c.long_prefill_token_threshold = 8;
  Harness h(c);
  ASSERT_TRUE(h.add("long1", tokens(40, 100), 2).ok());
  ASSERT_TRUE(h.add("long2", tokens(40, 300), 2).ok());
  ASSERT_TRUE(h.add("short", tokens(5, 500), 2).ok());
  const SchedulerOutput first = h.step();
  EXPECT_EQ(scheduled(first, "long1"), 8);
  EXPECT_EQ(scheduled(first, "long2"), 0) << "a second long prefill past max_long_partial_prefills";
  EXPECT_EQ(scheduled(first, "short"), 5) << "the short prompt passes the held-back long one";
  EXPECT_EQ(h.outputs["short"].size(), 1u);
  // long2 keeps its place ahead of later arrivals.
  ASSERT_TRUE(h.add("late", tokens(40, 700), 2).ok());
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 200);
    const PrefillCounts counts = step_and_count(h, 8);
    EXPECT_LE(counts.long_, 1) << "step " << h.num_steps;
    EXPECT_LE(counts.partial, 3) << "step " << h.num_steps;
  }
  h.run_to_completion();
  EXPECT_EQ(h.finals.size(), 4u);
}

TEST(PartialPrefills, HeldBackPromptsKeepTheirOrder) {
  Harness h(partial_config(2, 1, 8));
  ASSERT_TRUE(h.add("long1", tokens(40, 100), 2).ok());
  ASSERT_TRUE(h.add("long2", tokens(40, 300), 2).ok());
  ASSERT_TRUE(h.add("long3", tokens(40, 500), 2).ok());
  h.step();
  EXPECT_EQ(h.sched.num_waiting_reqs(), 2);
  // long2 is admitted before long3 once long1 is done.
  while (h.sched.get_request("long2")->status() == RequestStatus::kWaiting) {
    ASSERT_LT(h.num_steps, 100);
    h.step();
  }
  EXPECT_EQ(h.sched.get_request("long3")->status(), RequestStatus::kWaiting);
  h.run_to_completion();
}

TEST(PartialPrefills, TheBudgetIsSplitAndOnlyPromptsThatFinishPassTheLimit) {
  // No prompt is long here (threshold 500): each of N = 2 prefills takes at most 45 / 2 tokens; a
  // third prompt that the last token of budget would cut short waits, a one-token prompt that
  // finishes in it does not.
  SchedulerConfig c = partial_config(2, 2, 500);
  c.max_num_batched_tokens = 45;
  Harness h(c);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(h.add(id, tokens(50), 2).ok());
  ASSERT_TRUE(h.add("tiny", tokens(1, 900), 2).ok());
  const SchedulerOutput so = h.step();
  EXPECT_EQ(scheduled(so, "a"), 22);
  EXPECT_EQ(scheduled(so, "b"), 22);
  EXPECT_EQ(scheduled(so, "c"), 0);
  EXPECT_EQ(scheduled(so, "tiny"), 1);
  h.run_to_completion();
  EXPECT_EQ(h.finals.size(), 4u);
}

TEST(PartialPrefills, RunningDecodesStillGetTheirTokens) {
  Harness h(partial_config(2, 1, 8));
  ASSERT_TRUE(h.add("d", tokens(3), 30).ok());
  h.step();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(h.add("p" + std::to_string(i), tokens(60, 100 * (i + 1)), 2).ok());
  while (h.sched.get_request("d") != nullptr) {
    ASSERT_LT(h.num_steps, 100);
    EXPECT_EQ(scheduled(h.step(), "d"), 1);
  }
  h.run_to_completion();
}

TEST(PartialPrefillConfig, FollowsVllmRules) {
  SchedulerConfig c = small_config();
  EXPECT_TRUE(c.validate().ok()) << "N = M = 1 is the default";
  c.max_num_partial_prefills = 0;
  EXPECT_EQ(c.validate().message(), "max_num_partial_prefills (0) must be greater than or equal to 1");
  c.max_num_partial_prefills = 2;
  c.max_long_partial_prefills = 3;
  c.long_prefill_token_threshold = 16;
  EXPECT_EQ(c.validate().message(),
            "max_long_partial_prefills (3) must be greater than or equal to 1 and less than or equal to "
            "max_num_partial_prefills (2)");
  c.max_long_partial_prefills = 0;
  EXPECT_FALSE(c.validate().ok());
  c.max_long_partial_prefills = 2;
  EXPECT_TRUE(c.validate().ok());
  c.long_prefill_token_threshold = 513;
  EXPECT_EQ(c.validate().message(), "long_prefill_token_threshold (513) cannot be greater than the max_model_len (512)");
}

TEST(PartialPrefillConfig, TheThresholdDefaultsToFourPercentOfMaxModelLen) {
  SchedulerConfig c = small_config();
  c.max_model_len = 10000;
  c.max_num_partial_prefills = 4;
  EXPECT_FALSE(c.validate().ok()) << "no threshold and no fill_defaults()";
  c.fill_defaults();
  ASSERT_TRUE(c.long_prefill_token_threshold.has_value());
  EXPECT_EQ(*c.long_prefill_token_threshold, 400);
  EXPECT_TRUE(c.validate().ok());
  SchedulerConfig off = small_config();
  off.fill_defaults();
  EXPECT_FALSE(off.long_prefill_token_threshold.has_value()) << "N = 1 keeps chunking as it was";
  SchedulerConfig set = small_config();
  set.max_num_partial_prefills = 2;
  set.long_prefill_token_threshold = 7;
  set.fill_defaults();
  EXPECT_EQ(*set.long_prefill_token_threshold, 7);
}

}  // namespace
}  // namespace kvasir
