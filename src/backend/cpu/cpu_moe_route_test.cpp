// The CPU moe_route against a sort-based float64 routing (softmax / sigmoid, renormalize,
// correction bias, both grouped top-k scores, scaling), its tie rule (the lower expert and group
// win), and the validation that refuses what the op cannot run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_moe_test_util.h"
#include "backend/cpu/quant/quant_test_util.h"

namespace kvasir {
namespace {

using cpu::testing::make_cpu;
using cpu::testing::random_floats;
using cpu::testing::reference_route;
using cpu::testing::Routed;
using cpu::testing::run_route;

TEST(CpuMoeRoute, MatchesReferenceForEveryScoringAndGrouping) {
  std::mt19937 rng(11);
  CpuBackend cpu = make_cpu(3);
  struct Case {
    int64_t t, e;
    MoeRouting r;
    bool with_bias;
  };
  auto routing = [](int k, MoeScoring s, bool renorm, int groups, int topk_groups, MoeGroupScore gs, float scale) {
    MoeRouting r;
    r.top_k = k;
    r.scoring = s;
    r.renormalize = renorm;
    r.num_groups = groups;
    r.topk_groups = topk_groups;
    r.group_score = gs;
    r.routed_scaling_factor = scale;
    return r;
  };
  const Case cases[] = {
      {1, 8, routing(2, MoeScoring::kSoftmax, true, 1, 1, MoeGroupScore::kMax, 1.0f), false},   // Mixtral
      {17, 128, routing(8, MoeScoring::kSoftmax, true, 1, 1, MoeGroupScore::kMax, 1.0f), false},  // Qwen3-MoE
      {9, 60, routing(4, MoeScoring::kSoftmax, false, 1, 1, MoeGroupScore::kMax, 1.0f), false},   // Qwen2-MoE
      {0, 8, routing(1, MoeScoring::kSoftmax, false, 1, 1, MoeGroupScore::kMax, 1.0f), false},
      {5, 8, routing(8, MoeScoring::kSoftmax, true, 1, 1, MoeGroupScore::kMax, 1.0f), false},     // all experts
      {300, 64, routing(6, MoeScoring::kSoftmax, false, 8, 3, MoeGroupScore::kMax, 16.0f), false},  // V2 greedy
      {33, 256, routing(8, MoeScoring::kSigmoid, true, 8, 4, MoeGroupScore::kTop2Sum, 2.5f), true},  // V3
      {12, 32, routing(4, MoeScoring::kSigmoid, false, 1, 1, MoeGroupScore::kMax, 1.0f), true},
  };
  for (const Case& c : cases) {
    std::vector<float> logits = random_floats(static_cast<size_t>(c.t * c.e), rng, -3.0f, 3.0f);
    std::vector<float> bias;
    Tensor bias_t;
    MoeRouting r = c.r;
    if (c.with_bias) {
      bias = random_floats(static_cast<size_t>(c.e), rng, -0.3f, 0.3f);
      bias_t = Tensor::make(bias.data(), DType::kF32, {c.e});
      r.correction_bias = &bias_t;
    }
    ASSERT_TRUE(validate_moe_routing(r, c.e).ok());
    const Routed want = reference_route(logits, c.t, c.e, r, bias);
    const Routed got = run_route(cpu, logits, c.t, c.e, r);
    ASSERT_EQ(got.ids, want.ids) << "t=" << c.t << " e=" << c.e << " k=" << r.top_k;
    for (size_t i = 0; i < want.weights.size(); ++i) {
      EXPECT_NEAR(got.weights[i], want.weights[i], 2e-6 * std::max(1.0f, std::fabs(want.weights[i])))
          << "t=" << c.t << " e=" << c.e << " slot " << i;
    }
  }
}

TEST(CpuMoeRoute, TiesGoToTheLowerExpertAndGroup) {
  CpuBackend cpu = make_cpu(1);
  MoeRouting r;
  r.top_k = 3;
  std::vector<float> logits = {0.5f, 1.0f, 0.5f, 1.0f, 1.0f, 0.0f};
  Routed got = run_route(cpu, logits, 1, 6, r);
  EXPECT_EQ(got.ids, (std::vector<int32_t>{1, 3, 4}));
  // Groups {0,1}, {2,3}, {4,5} all score 1.0 by their max: the first two groups are kept.
  r.num_groups = 3;
  r.topk_groups = 2;
  r.top_k = 2;
  got = run_route(cpu, logits, 1, 6, r);
  EXPECT_EQ(got.ids, (std::vector<int32_t>{1, 3}));
  // The correction bias chooses, the unbiased scores weigh.
  std::vector<float> bias = {0, 0, 0, 0, 0, 5.0f};
  const Tensor bias_t = Tensor::make(bias.data(), DType::kF32, {6});
  MoeRouting biased;
  biased.top_k = 1;
  biased.scoring = MoeScoring::kSigmoid;
  biased.correction_bias = &bias_t;
  got = run_route(cpu, logits, 1, 6, biased);
  EXPECT_EQ(got.ids[0], 5);
  EXPECT_FLOAT_EQ(got.weights[0], 0.5f);  // sigmoid(0)
}

TEST(CpuMoeRoute, ValidationRefusesWhatTheOpCannotRun) {
  MoeRouting r;
  r.top_k = 9;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());
  r.top_k = 0;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());
  r.top_k = 2;
  EXPECT_TRUE(validate_moe_routing(r, 8).ok());
  r.num_groups = 3;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());  // 8 experts do not split into 3 groups
  r.num_groups = 4;
  r.topk_groups = 1;
  EXPECT_TRUE(validate_moe_routing(r, 8).ok());
  r.top_k = 3;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());  // one kept group of 2 holds only 2 experts
  r.top_k = 2;
  r.topk_groups = 5;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());
  r.topk_groups = 2;
  r.num_groups = 8;
  r.group_score = MoeGroupScore::kTop2Sum;
  EXPECT_FALSE(validate_moe_routing(r, 8).ok());  // groups of one expert have no top-2
  MoeRouting s;
  std::vector<float> bias(7);
  const Tensor b = Tensor::make(bias.data(), DType::kF32, {7});
  s.correction_bias = &b;
  EXPECT_FALSE(validate_moe_routing(s, 8).ok());
  s.correction_bias = nullptr;
  s.routed_scaling_factor = 0.0f;
  EXPECT_FALSE(validate_moe_routing(s, 8).ok());
}

}  // namespace
}  // namespace kvasir
