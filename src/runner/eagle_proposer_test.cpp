// EagleProposer on the tiny target of tests/data/eagle3 with either head kind (the EAGLE-3 head of
// tests/data/eagle3, the EAGLE-1 head of tests/data/eagle; CPU, exact matmuls), driven as
// the runner drives it (a target forward, then the step's rows): a prompt fed in two chunks drafts
// what one pass over it drafts; after a verify step that kept one draft the head's cache rolls back
// and drafts what a fresh proposer drafts from the whole history; k drafts take 1 + (k - 1) passes
// batched across requests; a jump in positions restarts the head's context; blocks come back on
// finish and preemption, and a request the pool cannot hold gets no drafts.
#include "runner/eagle_proposer.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "runner/host_sampling_backend_test_util.h"
#include "common/mapped_file.h"
#include "loader/weight_source.h"
#include "model/draft_heads/eagle3_head.h"
#include "model/draft_heads/eagle_head.h"
#include "model/registry.h"

namespace kvasir {
namespace {

const std::string kDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/";
const std::string kEagleDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle/";

// The parameter: the speculative method whose head drafts ("eagle3" or "eagle").
// The parameter: the speculative method whose head drafts ("eagle3" or "eagle"), and whether the
// backend pads decode batches (a graph-replaying device: the proposer's short passes become padded
// one-query rows, runner/draft_pass_batch.h) or not.
struct ProposerParam {
  std::string method;
  bool padded;
};

class EagleProposerTest : public ::testing::TestWithParam<ProposerParam> {
 protected:
  // A target and its head on one backend.
  struct Stack {
    std::unique_ptr<DecoderModel> target;
    KvCache target_cache;
    std::unique_ptr<DraftHead> head;
  };
  void SetUp() override {
    auto w = open_weights(kDir + "tiny_target");
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    target_weights_ = std::move(*w);
    auto config = load_model_config(*target_weights_);
    ASSERT_TRUE(config.ok());
    config_ = *config;
    const std::string head_dir = (GetParam().method == "eagle3" ? kDir : kEagleDir) + "tiny_head";
    auto hw = open_weights(head_dir);
    ASSERT_TRUE(hw.ok());
    head_weights_ = std::move(*hw);
    head_config_json_ = *read_text_file(head_dir + "/config.json");
    backend_ = make_backend(GetParam().padded);
    ASSERT_NO_FATAL_FAILURE(build(*backend_, stack_));
    target_ = stack_.target.get();
    head_ = stack_.head.get();
  }
  std::unique_ptr<Backend> make_backend(bool padded) {
    if (padded) return std::make_unique<HostSamplingBackend>(static_cast<int32_t>(config_.vocab_size));
    CpuBackendOptions bo;
    bo.precision = MatmulPrecision::kExact;
    return std::make_unique<CpuBackend>(bo);
  }
  void build(Backend& backend, Stack& s) {
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_logits = 8;
    auto m = DecoderModel::create(config_, *target_weights_, backend, mo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    s.target = std::move(*m);
    auto tc = s.target->allocate_kv_cache(128, 4);
    ASSERT_TRUE(tc.ok());
    s.target_cache = std::move(*tc);
    if (GetParam().method == "eagle3") {
      auto hc = parse_eagle3_head_config(head_config_json_, config_, "tiny_head");
      ASSERT_TRUE(hc.ok()) << hc.status().to_string();
      auto head = Eagle3Head::create(*hc, *head_weights_, *s.target, 64, 8);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      s.head = std::move(*head);
    } else {
      auto hc = parse_eagle_head_config(head_config_json_, config_, "tiny_head");
      ASSERT_TRUE(hc.ok()) << hc.status().to_string();
      auto head = EagleHead::create(*hc, *head_weights_, *s.target, 64, 8);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      s.head = std::move(*head);
    }
  }
  std::unique_ptr<EagleProposer> make(int num_blocks, DraftHead* head = nullptr) {
    if (head == nullptr) head = head_;
    auto c = head->allocate_kv_cache(num_blocks, 4);
    EXPECT_TRUE(c.ok());
    caches_.push_back(std::make_unique<KvCache>(std::move(*c)));
    return std::make_unique<EagleProposer>(*head, *caches_.back());
  }
  // The target's forward over sequences given as (slot base, tokens, first position): each
  // sequence owns target blocks [16 s, 16 s + 16) of 4 tokens, so it may run several times.
  struct Seq {
    int id;
    std::vector<TokenId> tokens;
    int32_t first_position;
  };
  void target_forward(const std::vector<Seq>& seqs, Stack* other = nullptr) {
    std::vector<int32_t> ids, pos, qsl = {0}, lens, tables;
    std::vector<int64_t> slots;
    for (const Seq& s : seqs) {
      for (size_t j = 0; j < s.tokens.size(); ++j) {
        const int32_t p = s.first_position + static_cast<int32_t>(j);
        ids.push_back(s.tokens[j]);
        pos.push_back(p);
        slots.push_back(int64_t{16 * s.id + p / 4} * 4 + p % 4);
      }
      qsl.push_back(static_cast<int32_t>(ids.size()));
      lens.push_back(s.first_position + static_cast<int32_t>(s.tokens.size()));
      for (int b = 0; b < 16; ++b) tables.push_back(16 * s.id + b);
    }
    ForwardBatch batch;
    batch.num_tokens = static_cast<int>(ids.size());
    batch.input_ids = ids.data();
    batch.positions = pos.data();
    batch.attn = AttentionMetadata{static_cast<int>(seqs.size()), batch.num_tokens, qsl.data(), lens.data(),
                                   tables.data(), 16, slots.data(), 4};
    Stack& on = other != nullptr ? *other : stack_;
    ASSERT_TRUE(on.target->run_layers(batch, on.target_cache).ok());
  }
  // One fresh proposer over the whole history in one step (the target recomputes all of it):
  // the drafts a cache that never rolled back gives.
  std::vector<TokenId> fresh_drafts(const std::vector<TokenId>& history, int k) {
    target_forward({{7, std::vector<TokenId>(history.begin(), history.end() - 1), 0}});
    auto p = make(32);
    std::vector<TokenId> drafts;
    EagleStepRow row{"fresh", history, 0, static_cast<int32_t>(history.size()) - 1, 0, k, &drafts};
    p->run_step(std::span<const EagleStepRow>(&row, 1));
    return drafts;
  }
  std::unique_ptr<WeightSource> target_weights_, head_weights_;
  ModelConfig config_;
  std::string head_config_json_;
  std::unique_ptr<Backend> backend_;
  Stack stack_;
  DecoderModel* target_ = nullptr;
  DraftHead* head_ = nullptr;
  std::vector<std::unique_ptr<KvCache>> caches_;
};

const std::vector<TokenId> kPrompt = {5, 17, 200, 33, 91, 4, 250, 12, 77, 140};

TEST_P(EagleProposerTest, ChunkedPrefillDraftsWhatOnePassDrafts) {
  std::vector<TokenId> history = kPrompt;
  history.push_back(60);  // the token the target sampled after the prompt
  const std::vector<TokenId> expected = fresh_drafts(history, 3);
  ASSERT_EQ(expected.size(), 3u);
  auto p = make(32);
  const int64_t passes0 = p->num_forward_passes();
  // Chunk 1: positions 0..5, no sampling; chunk 2: positions 6..9 and the sampled token.
  target_forward({{0, std::vector<TokenId>(kPrompt.begin(), kPrompt.begin() + 6), 0}});
  EagleStepRow chunk{"a", kPrompt, 0, 6, 0, 0, nullptr};
  p->run_step(std::span<const EagleStepRow>(&chunk, 1));
  target_forward({{0, std::vector<TokenId>(kPrompt.begin() + 6, kPrompt.end()), 6}});
  std::vector<TokenId> drafts;
  EagleStepRow last{"a", history, 6, 4, 0, 3, &drafts};
  p->run_step(std::span<const EagleStepRow>(&last, 1));
  EXPECT_EQ(drafts, expected);
  EXPECT_EQ(p->num_forward_passes() - passes0, 1 + 3);  // the chunk, then 1 + (k - 1)
}

TEST_P(EagleProposerTest, RollsBackToTheAcceptedTokensAfterAVerifyStep) {
  std::vector<TokenId> history = kPrompt;
  history.push_back(60);
  auto p = make(32);
  target_forward({{0, kPrompt, 0}});
  std::vector<TokenId> drafts;
  EagleStepRow first{"a", history, 0, 10, 0, 3, &drafts};
  p->run_step(std::span<const EagleStepRow>(&first, 1));
  ASSERT_EQ(drafts.size(), 3u);
  // Verify [60, d1, d2, d3] at positions 10..13: d1 kept, then the target says 99 (not d2).
  const std::vector<TokenId> verified = {60, drafts[0], drafts[1], drafts[2]};
  target_forward({{0, verified, 10}});
  history.push_back(drafts[0]);
  history.push_back(drafts[1] == 99 ? 98 : 99);
  std::vector<TokenId> next;
  EagleStepRow verify{"a", history, 10, 2, 0, 3, &next};
  p->run_step(std::span<const EagleStepRow>(&verify, 1));
  const std::vector<TokenId> fresh = fresh_drafts(history, 3);
  EXPECT_EQ(next, fresh);
}

TEST_P(EagleProposerTest, BatchedRequestsDraftAsAlone) {
  std::vector<TokenId> h1 = kPrompt, h2 = {9, 8, 7, 6, 5, 4};
  h1.push_back(60);
  h2.push_back(31);
  const std::vector<TokenId> e1 = fresh_drafts(h1, 4), e2 = fresh_drafts(h2, 2);
  auto p = make(32);
  target_forward({{0, kPrompt, 0}, {1, std::vector<TokenId>(h2.begin(), h2.end() - 1), 0}});
  std::vector<TokenId> d1, d2;
  const EagleStepRow rows[] = {{"a", h1, 0, 10, 0, 4, &d1}, {"b", h2, 0, 6, 10, 2, &d2}};
  const int64_t passes0 = p->num_forward_passes();
  p->run_step(rows);
  EXPECT_EQ(d1, e1);
  EXPECT_EQ(d2, e2);
  EXPECT_EQ(p->num_forward_passes() - passes0, 4);  // batched: 1 + (max k - 1)
}

TEST_P(EagleProposerTest, APositionJumpRestartsTheHeadContext) {
  std::vector<TokenId> history = kPrompt;
  history.push_back(60);
  auto p = make(32);
  // Positions 0..3 fed, then the target computes 8..9 only (a prefix-cache hit would do this).
  target_forward({{0, std::vector<TokenId>(kPrompt.begin(), kPrompt.begin() + 4), 0}});
  EagleStepRow chunk{"a", kPrompt, 0, 4, 0, 0, nullptr};
  p->run_step(std::span<const EagleStepRow>(&chunk, 1));
  target_forward({{0, std::vector<TokenId>(kPrompt.begin() + 4, kPrompt.end()), 4}});
  std::vector<TokenId> drafts;
  EagleStepRow jump{"a", history, 8, 2, 4, 2, &drafts};
  p->run_step(std::span<const EagleStepRow>(&jump, 1));
  EXPECT_EQ(p->num_restarts(), 1);
  EXPECT_EQ(drafts.size(), 2u);
}

TEST_P(EagleProposerTest, BlocksComeBackAndAFullPoolGivesNoDrafts) {
  std::vector<TokenId> history = kPrompt;
  history.push_back(60);
  auto p = make(5);  // 4 usable blocks of 4: the 10 positions and 2 draft positions need 3
  const int free0 = p->num_free_blocks();
  target_forward({{0, kPrompt, 0}});
  std::vector<TokenId> d;
  EagleStepRow a{"a", history, 0, 10, 0, 3, &d};
  p->run_step(std::span<const EagleStepRow>(&a, 1));
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(p->num_free_blocks(), free0 - 3);
  std::vector<TokenId> d2;
  EagleStepRow b{"b", history, 0, 10, 0, 3, &d2};
  p->run_step(std::span<const EagleStepRow>(&b, 1));
  EXPECT_TRUE(d2.empty());
  EXPECT_EQ(p->num_skipped_for_blocks(), 1);
  p->preempt_request("a");
  EXPECT_EQ(p->num_free_blocks(), free0);
  p->run_step(std::span<const EagleStepRow>(&b, 1));
  EXPECT_EQ(d2.size(), 3u);
  p->finish_request("b");
  EXPECT_EQ(p->num_free_blocks(), free0);
  EXPECT_EQ(p->num_tracked_requests(), 0);
}

// The padded layout drafts exactly what the plain one drafts (the CPU's exact matmuls are batch
// invariant, so padding rows change nothing of the real ones): a prompt, then verify steps of
// different accepted counts, two requests batched; every padded pass but the prompt's is one-query
// rows. (In the plain instantiation both sides are plain: the comparison still runs.)
TEST_P(EagleProposerTest, PaddedOneQueryPassesDraftWhatPlainPassesDraft) {
  std::unique_ptr<Backend> plain_backend = make_backend(false);
  Stack plain;
  ASSERT_NO_FATAL_FAILURE(build(*plain_backend, plain));
  auto p = make(64), q = make(64, plain.head.get());
  const std::vector<TokenId> prompt_b = {9, 8, 7, 6, 5, 4, 3, 2, 1, 11, 13, 17, 19, 23, 29, 31, 37, 41};
  std::vector<TokenId> ha = kPrompt, hb = prompt_b;
  ha.push_back(60);
  hb.push_back(31);
  // Step 0: both prompts (b's 18 tokens are a run too long for one-query rows).
  std::vector<Seq> seqs = {{0, kPrompt, 0}, {1, prompt_b, 0}};
  std::vector<TokenId> dp[2], dq[2];
  int32_t first[2] = {0, 0}, valid[2] = {10, 18};
  int64_t steps = 0;
  for (int step = 0; step < 5; ++step) {
    target_forward(seqs);
    target_forward(seqs, &plain);
    int32_t row = 0, rows_of[2];
    for (int i = 0; i < 2; ++i) rows_of[i] = row, row += static_cast<int32_t>(seqs[static_cast<size_t>(i)].tokens.size());
    const EagleStepRow rp[] = {{"a", ha, first[0], valid[0], rows_of[0], 4, &dp[0]}, {"b", hb, first[1], valid[1], rows_of[1], 3, &dp[1]}};
    const EagleStepRow rq[] = {{"a", ha, first[0], valid[0], rows_of[0], 4, &dq[0]}, {"b", hb, first[1], valid[1], rows_of[1], 3, &dq[1]}};
    p->run_step(rp);
    q->run_step(rq);
    ++steps;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(dp[i], dq[i]) << "step " << step << " request " << i;
      ASSERT_FALSE(dq[i].empty());
    }
    // A verify step of [last, drafts...] that keeps step % (k + 1) drafts of a and one of b, then
    // a bonus token off the drafts.
    std::vector<TokenId>* hist[2] = {&ha, &hb};
    const int keep[2] = {std::min<int>(step % 5, static_cast<int>(dq[0].size())), 1};
    seqs.clear();
    for (int i = 0; i < 2; ++i) {
      std::vector<TokenId>& h = *hist[i];
      const int32_t pos = static_cast<int32_t>(h.size()) - 1;
      std::vector<TokenId> verify = {h.back()};
      verify.insert(verify.end(), dq[i].begin(), dq[i].end());
      seqs.push_back({i, verify, pos});
      for (int j = 0; j < keep[i]; ++j) h.push_back(dq[i][static_cast<size_t>(j)]);
      h.push_back(static_cast<TokenId>(100 + step * 7 + i));
      first[i] = pos;
      valid[i] = 1 + keep[i];
    }
  }
  if (GetParam().padded) {
    EXPECT_GT(p->num_one_query_passes(), 0);
    EXPECT_LT(p->num_one_query_passes(), p->num_forward_passes()) << "the prompt pass keeps the multi-token layout";
    EXPECT_EQ(p->num_forward_passes() - p->num_one_query_passes(), 1);
  } else {
    EXPECT_EQ(p->num_one_query_passes(), 0);
  }
  EXPECT_EQ(q->num_one_query_passes(), 0);
}

INSTANTIATE_TEST_SUITE_P(BothHeadKindsAndLayouts, EagleProposerTest,
                         ::testing::Values(ProposerParam{"eagle3", false}, ProposerParam{"eagle", false},
                                           ProposerParam{"eagle3", true}, ProposerParam{"eagle", true}),
                         [](const ::testing::TestParamInfo<ProposerParam>& i) {
                           return i.param.method + (i.param.padded ? "_padded" : "_plain");
                         });

}  // namespace
}  // namespace kvasir
