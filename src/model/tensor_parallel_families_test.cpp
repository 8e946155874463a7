// Tensor parallelism beyond the Llama-style decoder, on the CPU backend: the dense families
// (Mistral, Qwen3, Qwen2 with its q/k/v biases, Gemma 2, Phi-3's fused projections), Gemma 3
// (QK-norm, sandwich norms, scaled embedding, sliding layers, one KV head replicated on every
// rank) and the softmax-top-k MoE families (Mixtral, Qwen3-MoE, Qwen2-MoE with its gated shared
// expert; experts sharded as vLLM's fused MoE: every rank holds each expert's slice of the
// intermediate dimension, one all-reduce after the experts), from HF directories and GGUF files
// (stacked [E, rows, cols] experts), split 2 and 4 ways, give the unsplit model's logits
// (relative L2 < 1e-5, exact matmuls) and greedy tokens on the tiny models' golden prompts.
// Families that cannot be split yet are refused naming the family, before a weight is read.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "common/mapped_file.h"
#include "model/tensor_parallel_test_util.h"

namespace kvasir {
namespace {

using tp_testing::SplitRun;

std::string tiny(const std::string& name) { return std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/" + name; }

// The token ids of a tiny model's golden prompts (tests/data/tiny/<name>/golden.json).
std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
  std::vector<std::vector<int32_t>> out;
  auto text = read_text_file(tiny(name) + "/golden.json", 1u << 20);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return out;
  auto j = parse_json(*text);
  EXPECT_TRUE(j.ok());
  if (!j.ok()) return out;
  for (const Json& p : j->find("prompts")->as_array()) {
    out.emplace_back();
    for (const Json& id : p.find("ids")->as_array()) out.back().push_back(static_cast<int32_t>(id.as_int()));
  }
  return out;
}

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

TEST(TensorParallelFamiliesTest, FamiliesThatCannotBeSplitYetAreRefusedNamingTheFamily) {
  for (const char* name : {"deepseek_v2_lite", "deepseek_v3", "gpt_oss"}) {
    const Status s = check(name, 2);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << name << ": " << s.to_string();
    auto config = load_model_config(**open_weights(tiny(name)));
    ASSERT_TRUE(config.ok());
    EXPECT_NE(s.message().find("not supported for the " + config->architecture + " family"), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(check("qwen3_moe", 4).ok());
  EXPECT_TRUE(check("gemma3", 2).ok());
  EXPECT_EQ(check("gemma3", 4).code(), StatusCode::kInvalidArgument) << "2 heads cannot be split 4 ways";
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
