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
class EagleProposerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto w = open_weights(kDir + "tiny_target");
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    target_weights_ = std::move(*w);
    auto config = load_model_config(*target_weights_);
    ASSERT_TRUE(config.ok());
    CpuBackendOptions bo;
    bo.precision = MatmulPrecision::kExact;
    backend_ = std::make_unique<CpuBackend>(bo);
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_logits = 8;
    auto m = DecoderModel::create(*config, *target_weights_, *backend_, mo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    target_ = std::move(*m);
    auto tc = target_->allocate_kv_cache(128, 4);
    ASSERT_TRUE(tc.ok());
    target_cache_ = std::move(*tc);
    if (GetParam() == "eagle3") {
      auto hw = open_weights(kDir + "tiny_head");
      ASSERT_TRUE(hw.ok());
      head_weights_ = std::move(*hw);
      auto hc = parse_eagle3_head_config(*read_text_file(kDir + "tiny_head/config.json"), *config, "tiny_head");
      ASSERT_TRUE(hc.ok()) << hc.status().to_string();
      auto head = Eagle3Head::create(*hc, *head_weights_, *target_, 64, 8);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      head_ = std::move(*head);
    } else {
      auto hw = open_weights(kEagleDir + "tiny_head");
      ASSERT_TRUE(hw.ok());
      head_weights_ = std::move(*hw);
      auto hc = parse_eagle_head_config(*read_text_file(kEagleDir + "tiny_head/config.json"), *config, "tiny_head");
      ASSERT_TRUE(hc.ok()) << hc.status().to_string();
      auto head = EagleHead::create(*hc, *head_weights_, *target_, 64, 8);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      head_ = std::move(*head);
    }
  }
  std::unique_ptr<EagleProposer> make(int num_blocks) {
    auto c = head_->allocate_kv_cache(num_blocks, 4);
    EXPECT_TRUE(c.ok());
    caches_.push_back(std::make_unique<KvCache>(std::move(*c)));
    return std::make_unique<EagleProposer>(*head_, *caches_.back());
  }
  // The target's forward over sequences given as (slot base, tokens, first position): each
  // sequence owns target blocks [16 s, 16 s + 16) of 4 tokens, so it may run several times.
  struct Seq {
    int id;
    std::vector<TokenId> tokens;
    int32_t first_position;
  };
  void target_forward(const std::vector<Seq>& seqs) {
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
    ASSERT_TRUE(target_->run_layers(batch, target_cache_).ok());
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
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<DecoderModel> target_;
  KvCache target_cache_;
  std::unique_ptr<DraftHead> head_;
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

INSTANTIATE_TEST_SUITE_P(BothHeadKinds, EagleProposerTest, ::testing::Values("eagle3", "eagle"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kvasir
