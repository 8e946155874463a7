// DraftModelProposer on the tiny random-weight Llama of tests/data/tiny (CPU, exact matmuls):
// k greedy drafts per request in 1 + (k - 1) batched passes; batched, chunked and one-at-a-time
// proposals equal the model's greedy chain from a fresh cache; after a rejection the cache rolls
// back to the accepted prefix and proposes what a fresh cache would; blocks come back on finish
// and preemption, and a request the pool cannot hold gets no drafts. Each also on a backend that
// pads decode batches and samples on the "device" (runner/host_sampling_backend_test_util.h): the
// proposer's short passes then become padded one-query rows (runner/draft_pass_batch.h) and draft
// exactly what the plain layout drafts.
#include "runner/draft_model_proposer.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "runner/host_sampling_backend_test_util.h"
#include "loader/weight_source.h"
#include "model/registry.h"

namespace kvasir {
namespace {

const std::string kTiny = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3/model.gguf";

// The parameter: whether the backend pads decode batches and samples on the "device".
class DraftModelProposerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto w = open_weights(kTiny);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    weights_ = std::move(*w);
    auto config = load_model_config(*weights_);
    ASSERT_TRUE(config.ok());
    config_ = *config;
    backend_ = make_backend(GetParam());
    ASSERT_NO_FATAL_FAILURE(model_ = make_model(*backend_));
  }
  std::unique_ptr<Backend> make_backend(bool padded) {
    if (padded) return std::make_unique<HostSamplingBackend>(static_cast<int32_t>(config_.vocab_size));
    CpuBackendOptions bo;
    bo.precision = MatmulPrecision::kExact;
    return std::make_unique<CpuBackend>(bo);
  }
  std::unique_ptr<DecoderModel> make_model(Backend& backend) {
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_logits = 8;
    auto m = DecoderModel::create(config_, *weights_, backend, mo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // A proposer over a fresh cache of `num_blocks` blocks of 4 tokens.
  std::unique_ptr<DraftModelProposer> make(int num_blocks, int max_tokens_per_forward = 64, DecoderModel* model = nullptr) {
    if (model == nullptr) model = model_.get();
    auto c = model->allocate_kv_cache(num_blocks, 4);
    EXPECT_TRUE(c.ok());
    caches_.push_back(std::make_unique<KvCache>(std::move(*c)));
    return std::make_unique<DraftModelProposer>(*model, *caches_.back(), max_tokens_per_forward);
  }
  // The model's greedy continuation of `history`, k tokens, each from a fresh proposer (no cache reuse).
  std::vector<TokenId> greedy_chain(std::vector<TokenId> history, int k) {
    std::vector<TokenId> out;
    for (int i = 0; i < k; ++i) {
      auto p = make(32);
      std::vector<TokenId> one;
      p->propose(ProposalContext{"ref", history, 1}, 1, &one);
      EXPECT_EQ(one.size(), 1u);
      if (one.empty()) return out;
      out.push_back(one[0]);
      history.push_back(one[0]);
    }
    return out;
  }
  std::unique_ptr<WeightSource> weights_;
  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DecoderModel> model_;
  std::vector<std::unique_ptr<KvCache>> caches_;
};

TEST_P(DraftModelProposerTest, BatchedDraftsAreTheGreedyChainAndRollBackAfterRejection) {
  const std::vector<TokenId> a = {1, 17, 42, 5, 99, 3, 64, 8, 21};
  const std::vector<TokenId> b = {1, 7, 7, 7, 30};
  const auto want_a = greedy_chain(a, 3), want_b = greedy_chain(b, 2);
  auto p = make(32);
  const int free0 = p->num_free_blocks();
  std::vector<TokenId> da, db;
  const ProposalContext ctxs[] = {{"a", a, 3}, {"b", b, 2}};
  const int ks[] = {3, 2};
  std::vector<TokenId>* outs[] = {&da, &db};
  p->propose_batch(ctxs, ks, outs);
  EXPECT_EQ(da, want_a);
  EXPECT_EQ(db, want_b);
  EXPECT_EQ(p->num_forward_passes(), 3);  // catch-up for both, then drafts 2 and 3

  // The target accepted a's first draft and then sampled something else: the cache must drop
  // drafts 2.. and propose as a fresh cache would.
  std::vector<TokenId> a2 = a;
  a2.push_back(da[0]);
  a2.push_back(da[1] == 0 ? 1 : 0);
  std::vector<TokenId> again;
  p->propose(ProposalContext{"a", a2, 3}, 3, &again);
  EXPECT_EQ(again, greedy_chain(a2, 3));

  p->finish_request("a");
  p->preempt_request("b");
  EXPECT_EQ(p->num_free_blocks(), free0);
  EXPECT_EQ(p->num_tracked_requests(), 0);
}

TEST_P(DraftModelProposerTest, ChunkedCatchUpEqualsOnePass) {
  std::vector<TokenId> h;
  for (int i = 0; i < 23; ++i) h.push_back(static_cast<TokenId>((i * 37 + 11) % 120));
  auto p = make(32, /*max_tokens_per_forward=*/5);
  std::vector<TokenId> d;
  p->propose(ProposalContext{"x", h, 4}, 3, &d);
  EXPECT_EQ(d, greedy_chain(h, 3));
  EXPECT_EQ(p->num_forward_passes(), 5 + 2);  // 23 tokens in passes of 5, then drafts 2 and 3
}

TEST_P(DraftModelProposerTest, ARequestThePoolCannotHoldGetsNoDrafts) {
  auto p = make(3);  // blocks 1 and 2: 8 positions
  const std::vector<TokenId> small = {1, 2, 3}, big = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<TokenId> d;
  p->propose(ProposalContext{"big", big, 1}, 2, &d);
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(p->num_skipped_for_blocks(), 1);
  p->propose(ProposalContext{"small", small, 1}, 2, &d);
  EXPECT_EQ(d.size(), 2u);
  p->finish_request("small");
  p->finish_request("big");
  EXPECT_EQ(p->num_free_blocks(), 2);
}

// Rounds of batched proposals with rejections in between (so each catch-up feeds a few accepted
// tokens): the padded layout's drafts equal the plain layout's on a model that neither pads nor
// samples on the device; the catch-up of a prompt longer than a one-query run stays multi-token.
TEST_P(DraftModelProposerTest, PaddedOneQueryPassesDraftWhatPlainPassesDraft) {
  std::unique_ptr<Backend> plain_backend = make_backend(false);
  std::unique_ptr<DecoderModel> plain_model;
  ASSERT_NO_FATAL_FAILURE(plain_model = make_model(*plain_backend));
  ASSERT_NE(plain_model, nullptr);
  auto p = make(64), q = make(64, 64, plain_model.get());
  std::vector<TokenId> h[3] = {{1, 17, 42, 5, 99, 3, 64, 8, 21}, {1, 7, 7, 7, 30}, {}};
  for (int i = 0; i < 20; ++i) h[2].push_back(static_cast<TokenId>((i * 37 + 11) % 120));
  const int ks[] = {4, 2, 3};
  for (int round = 0; round < 5; ++round) {
    std::vector<TokenId> dp[3], dq[3];
    const ProposalContext ctxs[] = {{"a", h[0], 3}, {"b", h[1], 2}, {"c", h[2], 3}};
    std::vector<TokenId>* outs_p[] = {&dp[0], &dp[1], &dp[2]};
    std::vector<TokenId>* outs_q[] = {&dq[0], &dq[1], &dq[2]};
    p->propose_batch(ctxs, ks, outs_p);
    q->propose_batch(ctxs, ks, outs_q);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(dp[i], dq[i]) << "round " << round << " request " << i;
      ASSERT_EQ(dq[i].size(), static_cast<size_t>(ks[i]));
      // Keep (round + i) % (k + 1) drafts, then a token the drafts did not say.
      const int keep = (round + i) % (ks[i] + 1);
      h[i].insert(h[i].end(), dq[i].begin(), dq[i].begin() + keep);
      h[i].push_back(static_cast<TokenId>(100 + round * 3 + i));
    }
  }
  EXPECT_EQ(q->num_one_query_passes(), 0);
  if (GetParam()) {
    // Round 0's catch-up holds c's 20-token prompt: multi-token; every later pass is one-query rows.
    EXPECT_EQ(p->num_forward_passes() - p->num_one_query_passes(), 1);
  } else {
    EXPECT_EQ(p->num_one_query_passes(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DraftModelProposerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "padded" : "plain"; });

}  // namespace
}  // namespace kvasir
