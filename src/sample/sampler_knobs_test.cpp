// Each sampling knob's effect on small hand-made logits, checked against exact distributions via
// Sampler::distribution, plus a large-vocab comparison of the selection paths with a full sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "sample/sampler.h"
#include "sample/sampler_test_util.h"

namespace kvasir {
namespace {

using testing::distribution_of;
using testing::Row;
using testing::sample_one;
using testing::softmax;

// probs 0.1, 0.2, 0.3, 0.4 at temperature 1.
std::vector<float> four_logits() {
  return {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
}

constexpr float kTol = 1e-6f;

TEST(SamplerKnobs, TemperatureOneIsSoftmax) {
  Sampler s(4);
  Row row;
  const std::vector<float> want = {0.1f, 0.2f, 0.3f, 0.4f};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
}

TEST(SamplerKnobs, TemperatureDividesLogits) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.5f;  // p^2, renormalised
  const std::vector<float> sharp = {0.01f / 0.3f, 0.04f / 0.3f, 0.09f / 0.3f, 0.16f / 0.3f};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), sharp, kTol);
  row.params.temperature = 2.0f;  // sqrt(p), renormalised
  double z = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  const std::vector<float> flat = {float(std::sqrt(0.1) / z), float(std::sqrt(0.2) / z),
                                   float(std::sqrt(0.3) / z), float(std::sqrt(0.4) / z)};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), flat, kTol);
}

TEST(SamplerKnobs, GreedyTakesArgmaxAndBreaksTiesToLowestId) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.0f;
  row.params.top_k = 1;  // ignored by greedy, as are the rest
  row.params.top_p = 0.1f;
  for (uint64_t key = 0; key < 20; ++key) {
    row.rng_key = key;
    EXPECT_EQ(sample_one(s, {1.0f, 3.0f, 3.0f, 2.0f}, row), 1);
  }
  const std::vector<float> one_hot = {0, 1, 0, 0};
  EXPECT_DIST_NEAR(distribution_of(s, {1.0f, 3.0f, 3.0f, 2.0f}, row), one_hot, 0.0f);
}

TEST(SamplerKnobs, TopKKeepsTheKLargest) {
  Sampler s(4);
  Row row;
  row.params.top_k = 2;
  const std::vector<float> want = {0, 0, 3.0f / 7, 4.0f / 7};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
  row.params.top_k = 1;
  const std::vector<float> top1 = {0, 0, 0, 1};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), top1, kTol);
}

TEST(SamplerKnobs, TopKKeepsTiesAtTheKthValue) {
  Sampler s(4);
  Row row;
  row.params.top_k = 2;
  // k-th largest is 2.0, held by two tokens: both stay (vLLM's logits < kth masking).
  const auto p = distribution_of(s, {3.0f, 2.0f, 2.0f, 0.0f}, row);
  EXPECT_GT(p[0], 0.0f);
  EXPECT_GT(p[1], 0.0f);
  EXPECT_EQ(p[1], p[2]);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(SamplerKnobs, TopKOffValuesKeepEverything) {
  Sampler s(4);
  const std::vector<float> want = {0.1f, 0.2f, 0.3f, 0.4f};
  for (int k : {-1, 0, 4, 100}) {
    Row row;
    row.params.top_k = k;
    SCOPED_TRACE(k);
    EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
  }
}

TEST(SamplerKnobs, TopPKeepsTheSmallestSetReachingP) {
  Sampler s(4);
  Row row;
  row.params.top_p = 0.6f;  // 0.4 + 0.3 = 0.7 >= 0.6
  const std::vector<float> two = {0, 0, 3.0f / 7, 4.0f / 7};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), two, kTol);
  row.params.top_p = 0.35f;  // 0.4 alone
  const std::vector<float> one = {0, 0, 0, 1};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), one, kTol);
  row.params.top_p = 0.75f;  // 0.7 < 0.75: 0.2 joins
  const std::vector<float> three = {0, 2.0f / 9, 3.0f / 9, 4.0f / 9};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), three, kTol);
}

TEST(SamplerKnobs, TopPKeepsTiesWithTheLastKeptToken) {
  Sampler s(4);
  Row row;
  row.params.top_p = 0.7f;  // 0.3 + 0.3 + 0.2 reaches it; the other 0.2 is a tie and stays
  const std::vector<float> logits = {std::log(0.3f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.2f)};
  const std::vector<float> all = {0.3f, 0.3f, 0.2f, 0.2f};
  EXPECT_DIST_NEAR(distribution_of(s, logits, row), all, kTol);
  row.params.top_p = 0.5f;
  const std::vector<float> pair = {0.5f, 0.5f, 0, 0};
  EXPECT_DIST_NEAR(distribution_of(s, logits, row), pair, kTol);
}

TEST(SamplerKnobs, TopPIsMeasuredAfterTopK) {
  Sampler s(4);
  Row row;
  row.params.top_k = 3;      // 0.2, 0.3, 0.4 renormalised by 0.9
  row.params.top_p = 0.75f;  // 0.4/0.9 + 0.3/0.9 = 0.78 >= 0.75
  const std::vector<float> want = {0, 0, 3.0f / 7, 4.0f / 7};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
}

TEST(SamplerKnobs, MinPKeepsTokensAboveAFractionOfTheMax) {
  Sampler s(4);
  Row row;
  row.params.min_p = 0.6f;  // prob >= 0.24
  const std::vector<float> two = {0, 0, 3.0f / 7, 4.0f / 7};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), two, kTol);
  row.params.min_p = 0.3f;  // prob >= 0.12
  const std::vector<float> three = {0, 2.0f / 9, 3.0f / 9, 4.0f / 9};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), three, kTol);
}

TEST(SamplerKnobs, MinPIsMeasuredAfterTemperature) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.5f;  // unnormalised 0.01, 0.04, 0.09, 0.16
  row.params.min_p = 0.3f;        // >= 0.048: only 0.09 and 0.16
  const std::vector<float> want = {0, 0, 9.0f / 25, 16.0f / 25};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
}

TEST(SamplerKnobs, MinPApplyBeforeTopPAsInVllmV1) {
  Sampler s(4);
  Row row;
  row.params.min_p = 0.3f;   // keeps 0.2, 0.3, 0.4 (mass 0.9)
  row.params.top_p = 0.75f;  // over the renormalised rest: 0.44 + 0.33 >= 0.75
  const std::vector<float> want = {0, 0, 3.0f / 7, 4.0f / 7};
  EXPECT_DIST_NEAR(distribution_of(s, four_logits(), row), want, kTol);
}

TEST(SamplerKnobs, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOncePerToken) {
  Sampler s(5);
  Row row;
  row.params.repetition_penalty = 2.0f;
  row.prompt = {0, 0};
  row.output = {1, 1, 1};
  // Seen tokens 0 (2 -> 1) and 1 (-2 -> -4), each once however often they appear.
  const auto want = softmax({1.0, -4.0, 1.0, 0.5, 0.0});
  EXPECT_DIST_NEAR(distribution_of(s, {2.0f, -2.0f, 1.0f, 0.5f, 0.0f}, row), want, kTol);
  row.params.repetition_penalty = 0.5f;  // below 1 rewards repetition
  const auto boosted = softmax({4.0, -1.0, 1.0, 0.5, 0.0});
  EXPECT_DIST_NEAR(distribution_of(s, {2.0f, -2.0f, 1.0f, 0.5f, 0.0f}, row), boosted, kTol);
}

TEST(SamplerKnobs, FrequencyAndPresencePenalisePerOutputCountOnly) {
  Sampler s(5);
  Row row;
  row.params.frequency_penalty = 0.5f;
  row.params.presence_penalty = 0.25f;
  row.prompt = {0, 0, 4};  // the prompt does not count for these two
  row.output = {2, 2, 3};
  const auto want = softmax({0.0, 0.0, -1.25, -0.75, 0.0});
  EXPECT_DIST_NEAR(distribution_of(s, std::vector<float>(5, 0.0f), row), want, kTol);
  row.params.frequency_penalty = -1.0f;  // negative values encourage
  row.params.presence_penalty = -0.5f;
  const auto encouraged = softmax({0.0, 0.0, 2.5, 1.5, 0.0});
  EXPECT_DIST_NEAR(distribution_of(s, std::vector<float>(5, 0.0f), row), encouraged, kTol);
}

TEST(SamplerKnobs, PenaltiesApplyInVllmOrder) {
  Sampler s(3);
  Row row;
  row.params.logit_bias = {{0, 2.0f}};
  row.params.repetition_penalty = 2.0f;
  row.params.frequency_penalty = 1.0f;
  row.output = {0};
  // bias, then repetition, then frequency: ((2 + 2) / 2) - 1 = 1.
  const auto want = softmax({1.0, 0.0, 0.0});
  EXPECT_DIST_NEAR(distribution_of(s, {2.0f, 0.0f, 0.0f}, row), want, kTol);
}

TEST(SamplerKnobs, LogitBiasIsAdded) {
  Sampler s(3);
  Row row;
  row.params.temperature = 0.0f;
  row.params.logit_bias = {{0, 5.0f}};
  EXPECT_EQ(sample_one(s, {0.0f, 1.0f, 2.0f}, row), 0);
  row.params.logit_bias = {{2, -100.0f}};
  EXPECT_EQ(sample_one(s, {0.0f, 1.0f, 2.0f}, row), 1);
  row.params.temperature = 1.0f;
  row.params.logit_bias = {{1, std::log(3.0f)}};
  const std::vector<float> want = {0.2f, 0.6f, 0.2f};
  EXPECT_DIST_NEAR(distribution_of(s, {0.0f, 0.0f, 0.0f}, row), want, kTol);
}

TEST(SamplerKnobs, MinTokensMasksEosAndStopTokensUntilReached) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.0f;
  row.params.min_tokens = 2;
  row.params.stop_token_ids = {2};
  row.eos = {3};
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 10.0f};
  row.num_generated_tokens = 1;
  EXPECT_EQ(sample_one(s, logits, row), 1);
  row.num_generated_tokens = 2;
  EXPECT_EQ(sample_one(s, logits, row), 3);

  row.params.temperature = 1.0f;
  row.num_generated_tokens = 0;
  const auto p = distribution_of(s, logits, row);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_NEAR(p[0] + p[1], 1.0f, kTol);
}

TEST(SamplerKnobs, MinTokensLeavesEosAloneWithIgnoreEos) {
  Sampler s(4);
  Row row;
  row.params.temperature = 0.0f;
  row.params.min_tokens = 5;
  row.params.ignore_eos = true;
  row.params.stop_token_ids = {2};
  row.eos = {3};
  EXPECT_EQ(sample_one(s, {0.0f, 1.0f, 5.0f, 10.0f}, row), 3);  // EOS allowed
  EXPECT_EQ(sample_one(s, {0.0f, 1.0f, 10.0f, 5.0f}, row), 3);  // stop id still masked
}

TEST(SamplerKnobs, LogitsAreRestoredAfterEveryKnob) {
  constexpr int kVocab = 300;
  Sampler s(kVocab);
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& v : logits) v = normal(gen);
  Row row;
  row.params.temperature = 0.7f;
  row.params.top_k = 20;
  row.params.top_p = 0.8f;
  row.params.min_p = 0.01f;
  row.params.repetition_penalty = 1.3f;
  row.params.presence_penalty = 0.5f;
  row.params.frequency_penalty = 0.3f;
  row.params.logit_bias = {{5, 3.0f}, {5, -1.0f}, {7, -100.0f}};
  row.params.min_tokens = 10;
  row.params.stop_token_ids = {9, 9};
  row.params.logprobs = 3;
  row.prompt = {1, 2, 3, 3};
  row.output = {3, 4, 4, 5, 9};
  row.eos = {0};
  std::vector<float> work = logits;
  const SamplingRequestState st = row.state();
  SamplerOutput out;
  s.sample(work, std::span<const SamplingRequestState>(&st, 1), &out);
  EXPECT_EQ(std::memcmp(work.data(), logits.data(), logits.size() * sizeof(float)), 0);
  std::vector<float> probs(kVocab);
  s.distribution(work, st, probs);
  EXPECT_EQ(std::memcmp(work.data(), logits.data(), logits.size() * sizeof(float)), 0);
}

TEST(SamplerKnobs, RowWithNothingToDrawFallsBackToArgmax) {
  Sampler s(3);
  Row row;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sample_one(s, {-inf, -inf, -inf}, row), 0);
  row.params.min_tokens = 1;
  row.params.stop_token_ids = {0, 1, 2};
  EXPECT_EQ(sample_one(s, {0.0f, 1.0f, 2.0f}, row), 0);
  row.params.min_tokens = 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(sample_one(s, {nan, 1.0f, nan}, row), 1);
  row.params.top_k = 1;
  EXPECT_EQ(sample_one(s, {nan, 1.0f, nan}, row), 1);
}

// Reference for one row by brute force: full sorts, double sums.
std::vector<float> reference_distribution(const std::vector<float>& x, const SamplingParams& p) {
  const size_t n = x.size();
  const float x_max = *std::max_element(x.begin(), x.end());
  std::vector<float> e(n);
  for (size_t i = 0; i < n; ++i) e[i] = std::exp((x[i] - x_max) / p.temperature);
  std::vector<bool> keep(n, true);
  if (p.top_k >= 1 && static_cast<size_t>(p.top_k) < n) {
    std::vector<float> sorted = x;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (size_t i = 0; i < n; ++i) keep[i] = x[i] >= sorted[static_cast<size_t>(p.top_k) - 1];
  }
  for (size_t i = 0; i < n; ++i) keep[i] = keep[i] && e[i] >= p.min_p;
  if (p.top_p < 1.0f) {
    std::vector<float> kept;
    double mass = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (keep[i]) kept.push_back(e[i]), mass += e[i];
    }
    std::sort(kept.begin(), kept.end(), std::greater<float>());
    double acc = 0.0;
    float cut = kept.back();
    for (float v : kept) {
      acc += v;
      if (acc >= p.top_p * mass) {
        cut = v;
        break;
      }
    }
    for (size_t i = 0; i < n; ++i) keep[i] = keep[i] && e[i] >= cut;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += keep[i] ? e[i] : 0.0;
  std::vector<float> probs(n, 0.0f);
  for (size_t i = 0; i < n; ++i) probs[i] = keep[i] ? static_cast<float>(e[i] / total) : 0.0f;
  return probs;
}

TEST(SamplerKnobs, LargeVocabSelectionMatchesFullSort) {
  constexpr int kVocab = 50000;  // past the small-sort cutoff: exercises the radix paths
  Sampler s(kVocab);
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  struct Case {
    float t;
    int k;
    float p;
    float min_p;
  };
  const Case cases[] = {{1.0f, 40, 1.0f, 0.0f}, {0.7f, 5000, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
                        {1.3f, 0, 0.5f, 0.05f}, {0.8f, 1000, 0.8f, 0.0f}, {2.0f, 0, 0.99f, 0.0f},
                        {1.0f, 0, 1.0f, 0.001f}};
  for (const Case& c : cases) {
    std::vector<float> x(kVocab);
    for (float& v : x) v = normal(gen);
    Row row;
    row.params.temperature = c.t;
    row.params.top_k = c.k;
    row.params.top_p = c.p;
    row.params.min_p = c.min_p;
    const auto got = distribution_of(s, x, row);
    const auto want = reference_distribution(x, row.params);
    size_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i] > 0.0f, want[i] > 0.0f) << "token " << i << " t=" << c.t << " k=" << c.k;
      ASSERT_NEAR(got[i], want[i], 1e-6f);
      kept += got[i] > 0.0f ? 1 : 0;
    }
    EXPECT_GT(kept, 1u);
  }
}

}  // namespace
}  // namespace kvasir
