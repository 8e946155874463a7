// Scheduler with speculative decoding, against the fake runner (which verifies drafts as the real
// one does): outputs equal plain decoding whatever the drafts, drafts count in the token budget
// and the KV allocation, stops inside an accepted run cut it, rejected drafts' KV is never
// published, preemption drops drafts, and the draft budget backs off with poor acceptance and
// with the batch size.
#include <gtest/gtest.h>

#include "sched/draft_budget.h"
#include "sched/scheduler_test_util.h"

namespace kvasir {
namespace {

using testing::Harness;
using testing::small_config;
using testing::tokens;

// The next k tokens the fake runner will sample: drafts that are always accepted.
std::vector<TokenId> right_drafts(const std::string& id, std::vector<TokenId> toks, int k) {
  std::vector<TokenId> d;
  for (int i = 0; i < k; ++i) {
    d.push_back(testing::default_sample(id, toks));
    toks.push_back(d.back());
  }
  return d;
}

// The first `num_right` drafts right, the rest wrong (the sampler never gives ids below 10).
auto drafts_with(int k, int num_right) {
  return [k, num_right](const std::string& id, const std::vector<TokenId>& toks) {
    std::vector<TokenId> d = right_drafts(id, toks, num_right);
    while (static_cast<int>(d.size()) < k) d.push_back(static_cast<TokenId>(d.size() % 7));
    return d;
  };
}

// Verifies every draft: the protocol tests need drafts in batched steps, which the adaptive
// budget would skip (its own tests below switch it back on).
SchedulerConfig spec_config(int num_blocks = 64, int k = 4) {
  SchedulerConfig c = small_config(num_blocks);
  c.num_speculative_tokens = k;
  c.spec_verify_all_drafts = true;
  return c;
}

std::map<std::string, std::vector<TokenId>> plain_outputs(SchedulerConfig c, int num_reqs, int max_tokens,
                                                           SamplingParams sp = {}) {
  c.num_speculative_tokens = 0;
  Harness h(c);
  for (int i = 0; i < num_reqs; ++i) EXPECT_TRUE(h.add("r" + std::to_string(i), tokens(5 + i, 100 + 10 * i), max_tokens, {}, sp).ok());
  h.run_to_completion();
  return h.outputs;
}

TEST(SchedulerSpec, OutputsEqualPlainDecodingWhateverTheDrafts) {
  const auto want = plain_outputs(spec_config(), 3, 30);
  for (int num_right : {0, 1, 2, 4}) {
    Harness h(spec_config());
    h.runner.propose = drafts_with(4, num_right);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), tokens(5 + i, 100 + 10 * i), 30).ok());
    h.run_to_completion();
    EXPECT_EQ(h.outputs, want) << num_right << " right drafts";
    EXPECT_GT(h.last_stats.spec_num_drafts, 0);
    EXPECT_EQ(h.last_stats.spec_num_accepted_tokens == 0, num_right == 0);
  }
}

TEST(SchedulerSpec, RightDraftsCutTheStepsAndAreCountedPerPosition) {
  Harness plain(small_config());
  ASSERT_TRUE(plain.add("r", tokens(6), 40).ok());
  plain.run_to_completion();
  Harness h(spec_config());
  h.runner.propose = drafts_with(4, 4);
  ASSERT_TRUE(h.add("r", tokens(6), 40).ok());
  h.run_to_completion();
  EXPECT_EQ(h.outputs, plain.outputs);
  EXPECT_LE(h.num_steps * 3, plain.num_steps) << "five tokens per step expected";
  const SchedulerStats& s = h.last_stats;
  EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
  ASSERT_EQ(s.spec_num_accepted_tokens_per_pos.size(), 4u);
  EXPECT_EQ(s.spec_num_accepted_tokens_per_pos[0], s.spec_num_drafts);
}

TEST(SchedulerSpec, DraftsCountInTheTokenBudgetAndNeverStarveOtherDecodes) {
  SchedulerConfig c = spec_config(128, 8);
  c.max_num_batched_tokens = 10;
  c.max_num_seqs = 8;
  Harness h(c);
  h.runner.propose = drafts_with(8, 8);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), tokens(3, 100 + 10 * i), 20).ok());
  bool saw_drafts = false;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 1000);
    int decodes_before = 0;
    for (const Request* r : h.sched.running()) decodes_before += r->num_computed_tokens() == r->num_tokens() - 1;
    const SchedulerOutput so = h.step();
    EXPECT_LE(so.total_num_scheduled_tokens, c.max_num_batched_tokens);
    int drafted = 0;
    for (const auto& [id, d] : so.scheduled_spec_decode_tokens) {
      drafted += static_cast<int>(d.size());
      EXPECT_EQ(so.num_scheduled_tokens.at(id), static_cast<int>(d.size()) + 1);
    }
    saw_drafts |= drafted > 0;
    // Every running decode got its token before anyone got drafts.
    if (drafted > 0) {
      EXPECT_GE(static_cast<int>(so.num_scheduled_tokens.size()), decodes_before);
    }
  }
  EXPECT_TRUE(saw_drafts);
}

TEST(SchedulerSpec, StopTokenInsideAnAcceptedRunEndsTheRequestThere) {
  // Find the 3rd output token of plain decoding, make it a stop token, and draft right past it.
  const auto plain = plain_outputs(spec_config(), 1, 30);
  const TokenId stop = plain.at("r0")[2];
  SamplingParams sp;
  sp.stop_token_ids = {stop};
  const auto want = plain_outputs(spec_config(), 1, 30, sp);
  Harness h(spec_config());
  h.runner.propose = drafts_with(4, 4);
  ASSERT_TRUE(h.add("r0", tokens(5, 100), 30, {}, sp).ok());
  h.run_to_completion();
  EXPECT_EQ(h.outputs, want);
  EXPECT_EQ(h.outputs.at("r0").back(), stop);
  EXPECT_EQ(h.finals.at("r0").stop_token_id, stop);
}

TEST(SchedulerSpec, DraftsNeverRunPastMaxTokens) {
  for (int max_tokens : {1, 2, 3, 7}) {
    Harness h(spec_config());
    h.runner.propose = drafts_with(4, 4);
    ASSERT_TRUE(h.add("r", tokens(5), max_tokens).ok());
    while (h.sched.has_unfinished_requests()) {
      const SchedulerOutput so = h.step();
      for (const auto& [id, d] : so.scheduled_spec_decode_tokens) {
        const Request* r = h.sched.get_request(id);
        if (r) {
          EXPECT_LT(r->num_output_tokens(), max_tokens);
        }
      }
    }
    h.run_to_completion();
    EXPECT_EQ(h.outputs.at("r").size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(h.finals.at("r").finish_reason, FinishReason::kLength);
  }
}

TEST(SchedulerSpec, RejectedDraftsAreNeverPublishedToThePrefixCache) {
  // Request a decodes with wrong drafts (their KV is written, then rolled back); b's prompt is
  // a's prompt and output, so b reuses a's published blocks. The fake runner checks every slot
  // b reads holds b's token: a published rejected draft would fail there.
  Harness h(spec_config(64, 3));
  h.runner.propose = drafts_with(3, 1);
  ASSERT_TRUE(h.add("a", tokens(6), 23).ok());
  h.run_to_completion();
  std::vector<TokenId> prompt_b = tokens(6);
  prompt_b.insert(prompt_b.end(), h.outputs.at("a").begin(), h.outputs.at("a").end());
  const int64_t hits_before = h.last_stats.prefix_cache_hits;
  ASSERT_TRUE(h.add("b", prompt_b, 4).ok());
  h.run_to_completion();
  EXPECT_GE(h.last_stats.prefix_cache_hits - hits_before, 24) << "b should reuse a's blocks";
}

TEST(SchedulerSpec, PreemptionDropsDraftsAndKeepsOutputs) {
  const SchedulerConfig tight = spec_config(14, 4);
  const auto want = plain_outputs(spec_config(256, 4), 4, 24);
  Harness h(tight);
  h.runner.propose = drafts_with(4, 2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), tokens(5 + i, 100 + 10 * i), 24).ok());
  bool saw_preemption = false;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 2000);
    const SchedulerOutput so = h.step();
    saw_preemption |= !so.preempted_req_ids.empty();
    for (const std::string& id : so.preempted_req_ids) {
      const Request* r = h.sched.get_request(id);
      ASSERT_NE(r, nullptr);
      EXPECT_TRUE(r->spec_token_ids().empty()) << "a preempted request kept drafts";
    }
  }
  h.run_to_completion();
  EXPECT_TRUE(saw_preemption);
  EXPECT_EQ(h.outputs, want);
}

TEST(SchedulerSpec, PoorAcceptanceBacksOff) {
  SchedulerConfig c = spec_config(64, 4);
  c.spec_verify_all_drafts = false;
  Harness h(c);
  h.runner.propose = drafts_with(4, 0);
  ASSERT_TRUE(h.add("r", tokens(5), 200).ok());
  h.run_to_completion();
  // Always-wrong drafts: the estimate falls below the batch-1 cost after a few tries; drafting
  // resumes only now and then as it relaxes toward the prior.
  EXPECT_LT(h.last_stats.spec_num_draft_tokens, 200 / 4);
  EXPECT_GT(h.last_stats.spec_num_drafts, 0);
}

// 32 requests at once, the adaptive budget deciding.
SchedulerConfig large_batch_config() {
  SchedulerConfig c = spec_config(512, 4);
  c.spec_verify_all_drafts = false;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 256;
  return c;
}

// A proposer that runs a model is asked for no drafts the next step would drop: with always-wrong
// drafts at batch 1 it drafts only now and then (the withheld steps relax the estimate, so it is
// tried again), and the outputs are plain decoding's.
TEST(SchedulerSpec, ModelProposersAreAskedOnlyForDraftsTheBudgetCouldVerify) {
  SchedulerConfig c = spec_config(64, 4);
  c.spec_verify_all_drafts = false;
  const auto want = plain_outputs(c, 1, 200);
  Harness h(c);
  h.runner.propose = drafts_with(4, 0);
  h.runner.honor_proposal_caps = true;
  ASSERT_TRUE(h.add("r0", tokens(5, 100), 200).ok());
  int withheld = 0;
  while (h.sched.has_unfinished_requests()) {
    ASSERT_LT(h.num_steps, 2000);
    const SchedulerOutput so = h.step();
    for (const auto& [id, n] : so.num_drafts_to_propose) {
      EXPECT_EQ(n, 0) << id;
      EXPECT_TRUE(so.num_scheduled_tokens.count(id)) << "a cap for a request this step does not run";
      ++withheld;
    }
  }
  EXPECT_EQ(h.outputs, want);
  EXPECT_GT(withheld, 100) << "the budget dropped drafts, yet they were asked for";
  EXPECT_LT(h.runner.num_proposals, 200 / 2);
  EXPECT_GT(h.last_stats.spec_num_drafts, 2) << "withheld steps must relax the estimate so drafting resumes";
  // Right drafts are always asked for.
  Harness good(c);
  good.runner.propose = drafts_with(4, 4);
  good.runner.honor_proposal_caps = true;
  ASSERT_TRUE(good.add("r0", tokens(5, 100), 60).ok());
  while (good.sched.has_unfinished_requests()) {
    ASSERT_LT(good.num_steps, 2000);
    EXPECT_TRUE(good.step().num_drafts_to_propose.empty());
  }
}

// At large batches the budget verifies nothing, so a model-running proposer is asked for nothing.
TEST(SchedulerSpec, LargeBatchesAskModelProposersForNoDrafts) {
  Harness h(large_batch_config());
  h.runner.propose = drafts_with(4, 3);
  h.runner.honor_proposal_caps = true;
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), tokens(4, 100 + 10 * i), 16).ok());
  h.run_to_completion();
  EXPECT_EQ(h.runner.num_proposals, 0);
  EXPECT_EQ(h.last_stats.spec_num_draft_tokens, 0);
}

TEST(SchedulerSpec, DraftBudgetFollowsAcceptanceAndBatchSize) {
  const StepCostCurve prior;  // nothing learned: the prior curve
  // Batch 1: a second token costs ~0.19 of a step, a third ~0.21, a fourth only ~0.08; the budget
  // takes the d with the best expected net gain, so it looks past a dear draft to cheap ones.
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.15, 1, 1), 0);  // 0.15 tokens for 0.19 of a step
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.3, 1, 1), 1);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.5, 1, 1), 3);   // 0.875 tokens for 0.48 beats 0.75 for 0.40
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.6, 1, 1), 3);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.95, 1, 1), 4);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 2, 0.95, 1, 1), 2);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.05, 1, 1), 0);
  // Larger batches: a token is worth about what it costs, so even good drafts stop.
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.9, 16, 16), 0);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.9, 256, 256), 0);
  EXPECT_GE(num_drafts_worth_verifying(prior, 4, 0.9, 2, 2), num_drafts_worth_verifying(prior, 4, 0.9, 8, 8));
  EXPECT_GT(prior.cost(4, 4), prior.cost(2, 2));
  EXPECT_LT(updated_acceptance_rate(0.7, 4, 0), 0.7);
  EXPECT_GT(updated_acceptance_rate(0.7, 4, 4), 0.7);
  EXPECT_GT(relaxed_acceptance_rate(0.1), 0.1);
}

TEST(SchedulerSpec, LargeBatchesVerifyNoDrafts) {
  SchedulerConfig c = large_batch_config();
  Harness h(c);
  h.runner.propose = drafts_with(4, 3);
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), tokens(4, 100 + 10 * i), 16).ok());
  h.run_to_completion();
  // No probe either: the step-cost curve probes only small batches.
  EXPECT_EQ(h.last_stats.spec_num_draft_tokens, 0);
  // The same batch with every draft verified: the switch above is what stopped them.
  c.spec_verify_all_drafts = true;
  Harness all(c);
  all.runner.propose = drafts_with(4, 3);
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(all.add("r" + std::to_string(i), tokens(4, 100 + 10 * i), 16).ok());
  all.run_to_completion();
  EXPECT_GT(all.last_stats.spec_num_draft_tokens, 0);
  EXPECT_EQ(all.outputs, h.outputs);
}

TEST(SchedulerSpec, AdaptiveBudgetDraftsAtBatchOne) {
  SchedulerConfig c = spec_config(64, 4);
  c.spec_verify_all_drafts = false;
  Harness h(c);
  h.runner.propose = drafts_with(4, 4);
  ASSERT_TRUE(h.add("r", tokens(5), 60).ok());
  h.run_to_completion();
  // Always-right drafts raise the estimate until all four are worth verifying.
  EXPECT_GT(h.last_stats.spec_num_draft_tokens, 2 * h.last_stats.spec_num_drafts);
  EXPECT_EQ(h.last_stats.spec_num_accepted_tokens, h.last_stats.spec_num_draft_tokens);
}

}  // namespace
}  // namespace kvasir
