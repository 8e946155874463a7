// Logprobs of sampled and prompt tokens: raw log-softmax values, ranks, top-N order and layout.
#include "sample/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "sample/sampler.h"
#include "sample/sampler_test_util.h"

namespace kvasir {
namespace {

using testing::Row;

double log_sum_exp(const std::vector<float>& x) {
  double s = 0.0;
  for (float v : x) s += std::exp(static_cast<double>(v));
  return std::log(s);
}

TEST(Logprobs, SampledTokenGetsRawLogSoftmaxAndRank) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.0f;
  row.params.logit_bias = {{0, 10.0f}};  // forces token 0; logprobs must ignore the bias
  row.params.logprobs = 2;
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  SamplerOutput out;
  ASSERT_EQ(testing::sample_one(s, x, row, &out), 0);
  const LogprobsTensors& lp = out.logprobs;
  ASSERT_EQ(lp.num_columns, 3);
  const double lse = log_sum_exp(x);
  EXPECT_EQ(lp.token_id(0, 0), 0);
  EXPECT_NEAR(lp.logprob(0, 0), 1.0 - lse, 1e-6);
  EXPECT_EQ(lp.ranks[0], 4);
  EXPECT_EQ(lp.num_logprobs[0], 2);
  EXPECT_EQ(lp.token_id(0, 1), 3);
  EXPECT_NEAR(lp.logprob(0, 1), 4.0 - lse, 1e-6);
  EXPECT_EQ(lp.token_id(0, 2), 2);
  EXPECT_NEAR(lp.logprob(0, 2), 3.0 - lse, 1e-6);
}

TEST(Logprobs, PenaltiesAndTemperatureDoNotChangeLogprobs) {
  Sampler s(4);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f};
  Row plain;
  plain.params.temperature = 0.0f;
  plain.params.logprobs = 4;
  Row knobs = plain;
  knobs.params.temperature = 0.3f;
  knobs.params.repetition_penalty = 1.7f;
  knobs.params.presence_penalty = 1.0f;
  knobs.params.top_k = 1;  // with T > 0 and top_k 1 the draw is the argmax too
  knobs.output = {2, 2};
  knobs.prompt = {0};
  SamplerOutput a, b;
  testing::sample_one(s, x, plain, &a);
  testing::sample_one(s, x, knobs, &b);
  for (int col = 1; col <= 4; ++col) {
    EXPECT_EQ(a.logprobs.token_id(0, col), b.logprobs.token_id(0, col));
    EXPECT_EQ(a.logprobs.logprob(0, col), b.logprobs.logprob(0, col));
  }
}

TEST(Logprobs, TopNIsDescendingWithTiesToLowerIds) {
  Sampler s(5);
  Row row;
  row.params.temperature = 0.0f;
  row.params.logprobs = 3;
  SamplerOutput out;
  EXPECT_EQ(testing::sample_one(s, {0.0f, 3.0f, 1.0f, 3.0f, 2.0f}, row, &out), 1);
  EXPECT_EQ(out.logprobs.token_id(0, 1), 1);
  EXPECT_EQ(out.logprobs.token_id(0, 2), 3);
  EXPECT_EQ(out.logprobs.token_id(0, 3), 4);
  EXPECT_EQ(out.logprobs.logprob(0, 1), out.logprobs.logprob(0, 2));
  EXPECT_EQ(out.logprobs.ranks[0], 2);  // ties rank pessimistically, as vLLM counts
}

TEST(Logprobs, ZeroLogprobsGivesOnlyTheSampledToken) {
  Sampler s(3);
  Row row;
  row.params.temperature = 0.0f;
  row.params.logprobs = 0;
  SamplerOutput out;
  testing::sample_one(s, {0.0f, 1.0f, 0.5f}, row, &out);
  ASSERT_EQ(out.logprobs.num_columns, 1);
  EXPECT_EQ(out.logprobs.token_id(0, 0), 1);
  EXPECT_EQ(out.logprobs.ranks[0], 1);
  EXPECT_NEAR(out.logprobs.logprob(0, 0), 1.0 - log_sum_exp({0.0f, 1.0f, 0.5f}), 1e-6);
}

TEST(Logprobs, RowsThatDidNotAskAreMarked) {
  Sampler s(3);
  Row asks, silent;
  asks.params.logprobs = 2;
  asks.params.temperature = 0.0f;
  silent.params.temperature = 0.0f;
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f};
  std::vector<SamplingRequestState> states = {silent.state(), asks.state()};
  SamplerOutput out;
  s.sample(logits, states, &out);
  EXPECT_EQ(out.sampled_token_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(out.logprobs.num_columns, 3);
  EXPECT_EQ(out.logprobs.num_logprobs, (std::vector<int32_t>{-1, 2}));
  EXPECT_EQ(out.logprobs.ranks[0], 0);
  EXPECT_EQ(out.logprobs.token_id(0, 0), kNoToken);
  EXPECT_EQ(out.logprobs.token_id(1, 0), 0);
  EXPECT_EQ(out.logprobs.token_id(1, 1), 0);
  EXPECT_EQ(out.logprobs.token_id(1, 2), 1);
}

TEST(Logprobs, NoRowAskingMeansNoColumns) {
  Sampler s(3);
  Row row;
  SamplerOutput out;
  testing::sample_one(s, {0.0f, 1.0f, 2.0f}, row, &out);
  EXPECT_EQ(out.logprobs.num_columns, 0);
  EXPECT_TRUE(out.logprobs.token_ids.empty());
}

TEST(Logprobs, PromptLogprobsScoreEachTargetToken) {
  Sampler s(4);
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f,   // predicts the token after pos 0
                                     3.0f, 2.0f, 1.0f, 0.0f,   // after pos 1
                                     1.0f, 1.0f, 1.0f, 1.0f};  // after pos 2
  const std::vector<int32_t> targets = {1, 0, 3};
  LogprobsTensors out;
  s.prompt_logprobs(logits, targets, 1, &out);
  ASSERT_EQ(out.num_rows, 3);
  ASSERT_EQ(out.num_columns, 2);
  const double lse = log_sum_exp({0.0f, 1.0f, 2.0f, 3.0f});
  EXPECT_NEAR(out.logprob(0, 0), 1.0 - lse, 1e-6);
  EXPECT_EQ(out.ranks[0], 3);
  EXPECT_EQ(out.token_id(0, 1), 3);
  EXPECT_NEAR(out.logprob(1, 0), 3.0 - lse, 1e-6);
  EXPECT_EQ(out.ranks[1], 1);
  EXPECT_NEAR(out.logprob(2, 0), std::log(0.25), 1e-6);
  EXPECT_EQ(out.ranks[2], 4);
  EXPECT_EQ(out.token_id(2, 1), 0);
}

TEST(Logprobs, LargeVocabTopNMatchesFullSort) {
  constexpr int kVocab = 100000;
  constexpr int kN = 20;
  Sampler s(kVocab);
  std::mt19937 gen(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(kVocab);
  for (float& v : x) v = normal(gen);
  LogprobsTensors out;
  s.prompt_logprobs(x, std::vector<int32_t>{123}, kN, &out);

  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  const double lse = std::log(sum);
  for (int j = 0; j < kN; ++j) {
    EXPECT_EQ(out.token_id(0, j + 1), order[j]);
    EXPECT_NEAR(out.logprob(0, j + 1), x[order[j]] - lse, 1e-5);
  }
  const auto rank = std::find(order.begin(), order.end(), 123) - order.begin() + 1;
  EXPECT_EQ(out.ranks[0], rank);
  EXPECT_NEAR(out.logprob(0, 0), x[123] - lse, 1e-5);
}

TEST(Logprobs, RequestAboveVocabIsClamped) {
  Sampler s(3);
  LogprobsTensors out;
  s.prompt_logprobs(std::vector<float>{0.0f, 1.0f, 2.0f}, std::vector<int32_t>{0}, 5, &out);
  EXPECT_EQ(out.num_logprobs[0], 3);
  EXPECT_EQ(out.token_id(0, 3), 0);
  EXPECT_EQ(out.token_id(0, 4), kNoToken);
}

}  // namespace
}  // namespace kvasir
