#include "sample/rejection_sampler.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sample/philox.h"
#include "sample/sampler_test_util.h"

namespace kvasir {
namespace {

using testing::Row;

// Pearson's statistic of counts against probabilities `want` over `n` draws. A cell the target
// gives no mass must get no draws (the test fails there instead). Degrees of freedom: cells with
// mass, minus one.
double chi_square(const std::vector<int>& counts, const std::vector<float>& want, int n, int* dof) {
  double chi2 = 0.0;
  *dof = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double expected = static_cast<double>(want[i]) * n;
    if (expected == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has no target mass";
      continue;
    }
    ++*dof;
    const double d = counts[i] - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

// The chi-square 0.1% upper quantile for 1..7 degrees of freedom. With fixed seeds a test either
// always passes or always fails; this bound makes a right sampler pass with 99.9% of seeds and
// fails a wrong one by far (WrongTargetFailsTheBound pins that down).
double chi2_bound(int dof) {
  static const double kQ999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  EXPECT_TRUE(dof >= 1 && dof <= 7);
  return kQ999[dof];
}

constexpr int kVocab = 8;
const std::vector<float> kLogits0 = {1.2f, 0.9f, 0.4f, 0.1f, -0.3f, -0.8f, -1.5f, -2.0f};
const std::vector<float> kLogits1 = {0.2f, 1.1f, 0.7f, -0.2f, 0.0f, -1.0f, 0.5f, -0.6f};
const std::vector<float> kLogits2 = {-0.4f, 0.3f, 1.3f, 0.6f, -0.1f, 0.2f, -0.9f, 0.8f};

// One verify step of a request with drafts {d0, d1} against fixed target logits at its three
// positions, for request key `key`. Returns the emitted tokens.
std::vector<int32_t> verify_once(Sampler& sampler, const SamplingParams& params, std::vector<int32_t> output,
                                 std::vector<int32_t> drafts, uint64_t key) {
  const int num_generated = static_cast<int>(output.size());
  output.insert(output.end(), drafts.begin(), drafts.end());
  DraftVerifyRequest req;
  req.state.params = &params;
  req.state.output_token_ids = output;
  req.state.num_generated_tokens = num_generated;
  req.state.rng_key = key;
  req.num_drafts = static_cast<int>(drafts.size());
  std::vector<SamplingRequestState> rows;
  append_verify_rows(req, &rows);
  std::vector<float> logits = kLogits0;
  logits.insert(logits.end(), kLogits1.begin(), kLogits1.end());
  logits.insert(logits.end(), kLogits2.begin(), kLogits2.end());
  logits.resize(rows.size() * kVocab);
  SamplerOutput out;
  sampler.sample(logits, rows, &out);
  const int n = num_emitted_tokens(req.drafts(), out.sampled_token_ids);
  return std::vector<int32_t>(out.sampled_token_ids.begin(), out.sampled_token_ids.begin() + n);
}

TEST(RejectionSampler, EmitsDraftsUpToTheFirstMismatchThenTheTargetToken) {
  const std::vector<int32_t> drafts = {4, 5, 6};
  EXPECT_EQ(num_emitted_tokens(drafts, std::vector<int32_t>{4, 5, 6, 9}), 4);  // all kept + bonus
  EXPECT_EQ(num_emitted_tokens(drafts, std::vector<int32_t>{4, 7, 6, 9}), 2);  // 4, then 7
  EXPECT_EQ(num_emitted_tokens(drafts, std::vector<int32_t>{1, 5, 6, 9}), 1);  // 1 only
  EXPECT_EQ(num_emitted_tokens({}, std::vector<int32_t>{3}), 1);
}

TEST(RejectionSampler, VerifyRowsSeeEarlierDraftsAsOutput) {
  SamplingParams p;
  std::vector<int32_t> output = {10, 11, 20, 21};  // two output tokens, then drafts 20, 21
  DraftVerifyRequest req;
  req.state.params = &p;
  req.state.output_token_ids = output;
  req.state.num_generated_tokens = 2;
  req.num_drafts = 2;
  std::vector<SamplingRequestState> rows;
  append_verify_rows(req, &rows);
  ASSERT_EQ(rows.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(rows[j].num_generated_tokens, 2 + j);
    EXPECT_EQ(rows[j].output_token_ids.size(), static_cast<size_t>(2 + j));
  }
  EXPECT_EQ(rows[1].output_token_ids.back(), 20);
  EXPECT_EQ(rows[2].output_token_ids.back(), 21);
}

TEST(RejectionSampler, GreedyKeepsDraftsEqualToTheArgmax) {
  Sampler sampler(kVocab);
  SamplingParams p;
  p.temperature = 0.0f;
  // argmax: row 0 -> 0, row 1 -> 1, row 2 -> 2.
  EXPECT_EQ(verify_once(sampler, p, {}, {0, 1}, 1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(verify_once(sampler, p, {}, {0, 3}, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(verify_once(sampler, p, {}, {5, 1}, 1), (std::vector<int32_t>{0}));
}

// Temperature 1 with top-p: the first emitted token follows the target's processed distribution
// whatever the draft, the draft is kept with probability p(draft), and the token after a kept
// draft follows the distribution that counts the draft as output (presence penalty).
TEST(RejectionSampler, AcceptedTokensFollowTheTargetDistributionWithTopP) {
  Sampler sampler(kVocab);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  p.presence_penalty = 1.5f;
  constexpr int kDraws = 40000;
  for (int32_t draft0 : {0, 3, 7}) {  // the likeliest token, a middling one, one outside top-p
    std::vector<int> first(kVocab, 0), second(kVocab, 0);
    int kept = 0;
    for (int i = 0; i < kDraws; ++i) {
      const auto t = verify_once(sampler, p, {}, {draft0, 2}, rng_key_for_request(1000 + i, 0, 0));
      ++first[static_cast<size_t>(t[0])];
      if (t[0] == draft0) {
        ++kept;
        ++second[static_cast<size_t>(t[1])];
      }
    }
    Row r0;
    r0.params = p;
    const auto p0 = testing::distribution_of(sampler, kLogits0, r0);
    int dof = 0;
    const double c0 = chi_square(first, p0, kDraws, &dof);
    EXPECT_LT(c0, chi2_bound(dof)) << "draft " << draft0;
    // Acceptance rate within 4.5 standard deviations of p(draft).
    const double pd = p0[static_cast<size_t>(draft0)];
    EXPECT_NEAR(kept / static_cast<double>(kDraws), pd, 4.5 * std::sqrt(pd * (1 - pd) / kDraws) + 1e-12);
    if (kept < 1000) continue;
    Row r1;
    r1.params = p;
    r1.output = {draft0};
    const auto p1 = testing::distribution_of(sampler, kLogits1, r1);
    const double c1 = chi_square(second, p1, kept, &dof);
    EXPECT_LT(c1, chi2_bound(dof)) << "after draft " << draft0;
  }
}

TEST(RejectionSampler, WrongTargetFailsTheBound) {
  // Guards the statistic: draws judged against the distribution without top-p must fail.
  Sampler sampler(kVocab);
  SamplingParams p;
  p.top_p = 0.8f;
  constexpr int kDraws = 40000;
  std::vector<int> first(kVocab, 0);
  for (int i = 0; i < kDraws; ++i) {
    ++first[static_cast<size_t>(verify_once(sampler, p, {}, {3, 2}, rng_key_for_request(7 + i, 0, 0))[0])];
  }
  Row plain;  // top_p 1
  const auto wrong = testing::distribution_of(sampler, kLogits0, plain);
  double chi2 = 0.0;
  for (size_t i = 0; i < wrong.size(); ++i) {
    const double e = wrong[i] * kDraws;
    chi2 += (first[i] - e) * (first[i] - e) / e;
  }
  EXPECT_GT(chi2, chi2_bound(7));
}

TEST(RejectionSampler, SeededOutputIsTheSameAsWithoutDrafts) {
  // Coupling: the emitted tokens are the plain sampler's draws at the same positions.
  Sampler sampler(kVocab);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 5;
  for (uint64_t key = 1; key < 200; ++key) {
    Row plain;
    plain.params = p;
    plain.rng_key = key;
    const int32_t alone = testing::sample_one(sampler, kLogits0, plain);
    EXPECT_EQ(verify_once(sampler, p, {}, {3, 2}, key)[0], alone);
  }
}

TEST(RejectionSampler, GeneralRejectionSamplingPreservesTheTarget) {
  // Draft distribution q, target p; drafts drawn from q. Output ~ p (Leviathan et al., thm 1).
  const std::vector<float> p = {0.30f, 0.05f, 0.20f, 0.0f, 0.15f, 0.10f, 0.12f, 0.08f};
  const std::vector<float> q = {0.10f, 0.30f, 0.05f, 0.20f, 0.15f, 0.05f, 0.05f, 0.10f};
  constexpr int kDraws = 60000;
  std::vector<int> counts(kVocab, 0);
  int accepted_total = 0;
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t key = rng_key_for_request(i, 0, 0);
    const double ud = philox_uniform(key, 0, 10);
    double acc = 0.0;
    int32_t draft = kVocab - 1;
    for (int t = 0; t < kVocab; ++t) {
      acc += q[static_cast<size_t>(t)];
      if (acc > ud) {
        draft = t;
        break;
      }
    }
    bool accepted = false;
    const int32_t tok = rejection_sample(p, q, draft, philox_uniform(key, 0, 11), philox_uniform(key, 0, 12), &accepted);
    accepted_total += accepted;
    ++counts[static_cast<size_t>(tok)];
  }
  int dof = 0;
  const double chi2 = chi_square(counts, p, kDraws, &dof);
  EXPECT_LT(chi2, chi2_bound(dof));
  // The acceptance rate is sum_i min(p_i, q_i) = 0.53.
  EXPECT_NEAR(accepted_total / static_cast<double>(kDraws), 0.53, 0.01);
}

}  // namespace
}  // namespace kvasir
