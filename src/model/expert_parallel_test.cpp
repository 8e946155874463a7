// Expert parallelism (--enable-expert-parallel) on the CPU backend: with N ranks each holding its
// contiguous share of whole routed experts (vLLM's linear placement), routing on every rank and
// one all-reduce of the MoE layer's partial sums, the tiny MoE models (Qwen3-MoE from HF and from
// GGUF stacked experts, Mixtral over TCP, Qwen2-MoE with its TP-sliced gated shared expert,
// DeepSeek-V2-Lite / V3 with MLA and shared experts, GPT-OSS with biased experts) give the
// unsplit model's logits (relative L2 < 1e-5, exact matmuls) and greedy tokens at N = 2 and 4,
// and 8 experts unevenly over 3 ranks (a dummy-weight Qwen3-MoE with 6 heads). Also: each rank's
// manifest names only its experts, and a model without experts is refused.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/tensor_parallel_test_util.h"

namespace kvasir {
namespace {

using tp_testing::golden_prompts;
using tp_testing::SplitRun;
using tp_testing::tiny;

void expect_expert_parallel_equals_whole(const std::string& name, const std::string& file, int tp, bool tcp = false) {
  SplitRun run{tiny(name) + file, tp, golden_prompts(name), 8, tcp};
  run.expert_parallel = true;
  tp_testing::expect_split_equals_whole(run);
}

TEST(ExpertParallelTest, ExpertRangeIsVllmsLinearPlacement) {
  EXPECT_EQ(expert_range(8, 1, 2).first, 4);
  EXPECT_EQ(expert_range(8, 1, 2).count, 4);
  // Uneven: the first E % N ranks hold one more.
  const int firsts[] = {0, 3, 6}, counts[] = {3, 3, 2};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(expert_range(8, r, 3).first, firsts[r]) << r;
    EXPECT_EQ(expert_range(8, r, 3).count, counts[r]) << r;
  }
  EXPECT_TRUE(expert_range(8, 2, 3).holds(7));
  EXPECT_FALSE(expert_range(8, 2, 3).holds(5));
}

// The experts' roles each rank's manifest keeps, under expert parallelism.
std::set<std::string> expert_roles(const std::string& name, int rank, int size) {
  auto weights = open_weights(tiny(name));
  EXPECT_TRUE(weights.ok());
  auto config = load_model_config(**weights);
  EXPECT_TRUE(config.ok());
  auto family = family_of(*config);
  WeightManifest m = (*family)->manifest(*config);
  const WeightSource& src = **weights;
  const Status s = shard_manifest(
      m, *config, rank, size,
      [&src](const WeightSpec& spec) { return src.has_tensor(spec.gguf.name) || src.has_tensor(spec.hf.name); },
      /*expert_parallel=*/true);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::set<std::string> roles;
  for (const WeightSpec& spec : m.layers[1]) {
    if (spec.role.rfind("ffn_gate.", 0) == 0) {
      roles.insert(spec.role);
      EXPECT_EQ(spec.shape, (std::vector<int64_t>{32, 64})) << "whole experts: " << spec.role;
    }
  }
  return roles;
}

TEST(ExpertParallelTest, EachRankBindsOnlyItsWholeExperts) {
  EXPECT_EQ(expert_roles("qwen3_moe", 1, 2), (std::set<std::string>{"ffn_gate.4.weight", "ffn_gate.5.weight",
                                                                      "ffn_gate.6.weight", "ffn_gate.7.weight"}));
  EXPECT_EQ(expert_roles("qwen3_moe", 2, 3),
            (std::set<std::string>{"ffn_gate.6.weight", "ffn_gate.7.weight"}));
  auto config = load_model_config(**open_weights(tiny("qwen2_moe")));
  ASSERT_TRUE(config.ok());
  auto shard = shard_config(*config, 1, 2, /*expert_parallel=*/true);
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  EXPECT_EQ(shard->family_params.at("moe_intermediate_size"), 32) << "experts whole";
  EXPECT_EQ(shard->family_params.at("shared_expert_intermediate_size"), 24) << "shared expert sliced";
  EXPECT_EQ(held_experts(*shard).first, 4);
  EXPECT_EQ(held_experts(*shard).count, 4);
}

TEST(ExpertParallelTest, AModelWithoutExpertsIsRefused) {
  auto config = load_model_config(**open_weights(tiny("llama3")));
  ASSERT_TRUE(config.ok());
  for (int size : {1, 2}) {
    const Status s = check_tensor_parallel(*config, size, [](const WeightSpec&) { return true; }, true);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("needs a mixture-of-experts model; the llama model has no experts"), std::string::npos)
        << s.message();
  }
  auto moe = load_model_config(**open_weights(tiny("qwen3_moe")));
  ASSERT_TRUE(moe.ok());
  EXPECT_TRUE(check_tensor_parallel(*moe, 4, [](const WeightSpec&) { return true; }, true).ok());
  ModelConfig wide = *moe;
  wide.num_heads = 16;  // so that only the experts stop 16 ranks
  const Status many = shard_config(wide, 0, 16, true).status();
  EXPECT_EQ(many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.message().find("8 experts cannot be distributed over 16 ranks"),
            std::string::npos)
      << many.message();
}

// 8 experts over 3 ranks: 3, 3 and 2 (a Qwen3-MoE of 6 heads and dummy weights, since no tiny
// checkpoint has heads that 3 divides).
TEST(ExpertParallelTest, UnevenExpertsOverThreeRanksEqualTheWholeModel) {
  SplitRun run{"dummy qwen3_moe, 6 heads", 3, {{3, 17, 42, 99, 120, 7}, {250, 1}}, 6, false};
  run.expert_parallel = true;
  run.dummy_config = R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
      "hidden_size": 48, "intermediate_size": 96, "moe_intermediate_size": 16, "num_attention_heads": 6,
      "num_key_value_heads": 3, "head_dim": 8, "num_hidden_layers": 2, "num_experts": 8,
      "num_experts_per_tok": 3, "norm_topk_prob": true, "vocab_size": 256, "max_position_embeddings": 64,
      "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
  tp_testing::expect_split_equals_whole(run);
}

TEST(ExpertParallelTest, TinyQwen3MoeHfAndGgufTwoAndFourRanks) {
  expect_expert_parallel_equals_whole("qwen3_moe", "", 2);
  expect_expert_parallel_equals_whole("qwen3_moe", "", 4);
  expect_expert_parallel_equals_whole("qwen3_moe", "/model.gguf", 2);
  expect_expert_parallel_equals_whole("qwen3_moe", "/model.gguf", 4);
}

TEST(ExpertParallelTest, TinyMixtralTwoRanksOverTcpAndFourOverShm) {
  expect_expert_parallel_equals_whole("mixtral", "", 2, /*tcp=*/true);
  expect_expert_parallel_equals_whole("mixtral", "/model.gguf", 4);
}

TEST(ExpertParallelTest, TinyQwen2MoeWithItsSlicedSharedExpertTwoAndFourRanks) {
  expect_expert_parallel_equals_whole("qwen2_moe", "", 2);
  expect_expert_parallel_equals_whole("qwen2_moe", "/model.gguf", 4);
}

TEST(ExpertParallelTest, TinyDeepseekTwoAndFourRanks) {
  expect_expert_parallel_equals_whole("deepseek_v2_lite", "", 2);
  expect_expert_parallel_equals_whole("deepseek_v2_lite", "/model.gguf", 4);
  expect_expert_parallel_equals_whole("deepseek_v3", "", 4);
  expect_expert_parallel_equals_whole("deepseek_v3", "/model.gguf", 2);
}

TEST(ExpertParallelTest, TinyGptOssWithBiasedExpertsTwoAndFourRanks) {
  expect_expert_parallel_equals_whole("gpt_oss", "", 2);
  expect_expert_parallel_equals_whole("gpt_oss", "/model.gguf", 4);
}

}  // namespace
}  // namespace kvasir
