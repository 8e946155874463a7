// Tensor parallelism beyond the Llama-style decoder, on the CPU backend: the dense families
// (Mistral, Qwen3, Qwen2 with its q/k/v biases, Gemma 2, Phi-3's fused projections), Gemma 3
// (QK-norm, sandwich norms, scaled embedding, sliding layers, one KV head replicated on every
// rank) and the softmax-top-k MoE families (Mixtral, Qwen3-MoE, Qwen2-MoE with its gated shared
// expert; experts sharded as vLLM's fused MoE: every rank holds each expert's slice of the
// intermediate dimension, one all-reduce after the experts), from HF directories and GGUF files
// (stacked [E, rows, cols] experts), DeepSeek-V2/V2-Lite/V3 (MLA split by heads, the latent cache
// replicated; MoE with shared experts) and GPT-OSS (sinks, row-parallel biases on rank 0, biased
// transposed experts), split 2 and 4 ways, give the unsplit model's logits (relative L2 < 1e-5,
// exact matmuls) and greedy tokens on the tiny models' golden prompts. A role nobody knows how to
// split is refused naming the family, before a weight is read.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/tensor_parallel_test_util.h"

namespace kvasir {
namespace {

using tp_testing::SplitRun;

using tp_testing::golden_prompts;
using tp_testing::tiny;

void expect_golden_split_equals_whole(const std::string& name, const std::string& file, int tp) {
  tp_testing::expect_split_equals_whole(SplitRun{tiny(name) + file, tp, golden_prompts(name), 8, false});
}

TEST(TensorParallelFamiliesTest, TinyGemma3HfSplitTwoWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("gemma3", "", 2);
}

TEST(TensorParallelFamiliesTest, TinyGemma3GgufSplitTwoWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("gemma3", "/model.gguf", 2);
}

TEST(TensorParallelFamiliesTest, EveryDenseFamilySplitTwoAndFourWaysEqualsTheWholeModel) {
  for (const char* name : {"mistral", "qwen3", "qwen25_yarn", "gemma2", "phi3", "phi3_longrope"}) {
    SCOPED_TRACE(name);
    expect_golden_split_equals_whole(name, "", 2);
    expect_golden_split_equals_whole(name, "/model.gguf", 4);
  }
}

TEST(TensorParallelFamiliesTest, TinyQwen3MoeHfSplitTwoAndFourWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("qwen3_moe", "", 2);
  expect_golden_split_equals_whole("qwen3_moe", "", 4);
}

TEST(TensorParallelFamiliesTest, TinyQwen3MoeGgufStackedExpertsSplitTwoAndFourWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("qwen3_moe", "/model.gguf", 2);
  expect_golden_split_equals_whole("qwen3_moe", "/model.gguf", 4);
}

TEST(TensorParallelFamiliesTest, DenseAndMoeLayersTogetherSplitTwoWaysEqualTheWholeModel) {
  expect_golden_split_equals_whole("qwen3_moe_mlp_only", "", 2);
}

TEST(TensorParallelFamiliesTest, TinyQwen2MoeWithBiasesAndAGatedSharedExpertSplitTwoAndFourWays) {
  expect_golden_split_equals_whole("qwen2_moe", "", 2);
  expect_golden_split_equals_whole("qwen2_moe", "/model.gguf", 4);
}

// DeepSeek: MLA split by heads (q / q_b rows, kv_b or attn_k_b / attn_v_b per head, o_proj
// columns), the latent projections and cache replicated; dense and MoE layers with shared experts.
TEST(TensorParallelFamiliesTest, TinyDeepseekV2LiteSplitTwoAndFourWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("deepseek_v2_lite", "", 2);
  expect_golden_split_equals_whole("deepseek_v2_lite", "", 4);
  expect_golden_split_equals_whole("deepseek_v2_lite", "/model.gguf", 2);
  expect_golden_split_equals_whole("deepseek_v2_lite", "/model.gguf", 4);
}

TEST(TensorParallelFamiliesTest, TinyDeepseekV3SplitTwoAndFourWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("deepseek_v3", "", 2);
  expect_golden_split_equals_whole("deepseek_v3", "", 4);
  expect_golden_split_equals_whole("deepseek_v3", "/model.gguf", 4);
}

TEST(TensorParallelFamiliesTest, TinyDeepseekV2WithQLoraAndGroupedRoutingSplitTwoWays) {
  expect_golden_split_equals_whole("deepseek_v2", "", 2);
}

// GPT-OSS: sinks split with their heads, o_proj's and the experts' down biases on rank 0 only,
// gate_up rows (interleaved, transposed at load) and biases split, sliding layers unchanged; at
// TP=4 each rank has one of the 2 KV heads.
TEST(TensorParallelFamiliesTest, TinyGptOssSplitTwoAndFourWaysEqualsTheWholeModel) {
  expect_golden_split_equals_whole("gpt_oss", "", 2);
  expect_golden_split_equals_whole("gpt_oss", "", 4);
  expect_golden_split_equals_whole("gpt_oss", "/model.gguf", 2);
  expect_golden_split_equals_whole("gpt_oss", "/model.gguf", 4);
}

TEST(TensorParallelFamiliesTest, RowParallelBiasesAreHeldByRankZeroOnly) {
  auto weights = open_weights(tiny("gpt_oss"));
  ASSERT_TRUE(weights.ok());
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok());
  for (int rank = 0; rank < 2; ++rank) {
    auto family = family_of(*config);
    ASSERT_TRUE(family.ok());
    WeightManifest m = (*family)->manifest(*config);
    ASSERT_TRUE(shard_manifest(m, *config, rank, 2, [](const WeightSpec&) { return true; }).ok());
    for (const char* role : {"attn_output.bias", "ffn_down_exps.bias"}) {
      EXPECT_EQ(m.find(m.layers[1], role) != nullptr, rank == 0) << role << " on rank " << rank;
    }
    const WeightSpec* sinks = m.find(m.layers[1], "attn_sinks.weight");
    ASSERT_NE(sinks, nullptr);
    EXPECT_EQ(sinks->shape, std::vector<int64_t>{2}) << "two of the four heads' sinks";
  }
}

TEST(TensorParallelFamiliesTest, TinyMixtralSplitTwoWaysOverTcpEqualsTheWholeModel) {
  tp_testing::expect_split_equals_whole(SplitRun{tiny("mixtral"), 2, golden_prompts("mixtral"), 8, /*tcp=*/true});
}

// What check_tensor_parallel (run before any worker starts) says about a tiny model's files.
Status check(const std::string& name, int tp) {
  auto weights = open_weights(tiny(name));
  if (!weights.ok()) return weights.status();
  auto config = load_model_config(**weights);
  if (!config.ok()) return config.status();
  const WeightSource& src = **weights;
  return check_tensor_parallel(*config, tp, [&src](const WeightSpec& spec) {
    return src.has_tensor(spec.gguf.name) || src.has_tensor(spec.hf.name);
  });
}

TEST(TensorParallelFamiliesTest, EveryRegisteredTinyModelCanBeSplitWhereItsHeadsDivide) {
  for (const char* name : {"llama3", "mistral", "qwen3", "qwen25_yarn", "gemma2", "phi3", "phi3_longrope", "mixtral",
                           "qwen2_moe", "qwen3_moe", "qwen3_moe_mlp_only", "deepseek_v2", "deepseek_v2_lite",
                           "deepseek_v3", "gpt_oss"}) {
    EXPECT_TRUE(check(name, 2).ok()) << name << ": " << check(name, 2).to_string();
  }
  EXPECT_TRUE(check("qwen3_moe", 4).ok());
  EXPECT_TRUE(check("gemma3", 2).ok());
  EXPECT_EQ(check("gemma3", 4).code(), StatusCode::kInvalidArgument) << "2 heads cannot be split 4 ways";
}

TEST(TensorParallelFamiliesTest, ARoleNobodySplitsIsRefusedNamingTheFamily) {
  auto config = load_model_config(**open_weights(tiny("llama3")));
  ASSERT_TRUE(config.ok());
  WeightManifest m = dense_decoder_manifest(*config);
  WeightSpec extra;
  extra.role = "mystery_proj.weight";
  extra.gguf.name = "blk.0.mystery_proj.weight";
  extra.shape = {8, 8};
  m.layers[0].push_back(extra);
  const Status s = shard_manifest(m, *config, 0, 2, [](const WeightSpec&) { return true; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find("not supported for the llama family yet (it does not split weight mystery_proj.weight)"),
            std::string::npos)
      << s.message();
}

TEST(TensorParallelFamiliesTest, ExpertSizesThatDoNotDivideAreRefusedWithVllmsMessage) {
  auto config = load_model_config(**open_weights(tiny("qwen3_moe")));
  ASSERT_TRUE(config.ok());
  ModelConfig c = *config;
  c.family_params["moe_intermediate_size"] = 30;
  auto s = shard_config(c, 0, 4).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("moe_intermediate_size (30) must be divisible by tensor parallel size (4)"),
            std::string::npos)
      << s.message();
  auto two = shard_config(*config, 1, 2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->family_params.at("moe_intermediate_size"), 16) << "each rank holds half of every expert";
  EXPECT_EQ(two->family_params.at("num_experts"), 8) << "every rank holds every expert";
}

}  // namespace
}  // namespace kvasir
