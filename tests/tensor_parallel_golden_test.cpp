// Tensor parallelism on the real models and their golden prompts (tests/data/golden): Gemma 3
// 270M (Q4_K_M GGUF at TP=2 and TP=4, where its one KV head is on every rank, and its float32 HF
// directory at TP=2) and SmolLM2-135M (Q4_1 GGUF at TP=3: its 9 heads and 3 KV heads cannot be
// split 2 or 4 ways, which is refused with vLLM's message) give the unsplit model's logits
// (relative L2 < 1e-5, exact matmuls) and the same greedy continuation at every step. The MoE
// family's golden prompts run in model/tensor_parallel_families_test. Skips without models/.
#include <gtest/gtest.h>

#include "golden.h"
#include "model/tensor_parallel_test_util.h"

namespace kvasir::testing {
namespace {

constexpr size_t kPrompts = 3;
constexpr size_t kMaxPromptTokens = 32;

// The first short golden prompts of `model` (token ids as the reference tokenized them).
std::vector<std::vector<int32_t>> short_golden_prompts(const std::string& model) {
  std::vector<std::vector<int32_t>> out;
  auto g = load_golden(model);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return out;
  for (const GoldenPrompt& p : g->prompts) {
    if (p.token_ids.size() <= kMaxPromptTokens && out.size() < kPrompts) out.push_back(p.token_ids);
  }
  EXPECT_EQ(out.size(), kPrompts);
  return out;
}

void expect_split_equals_whole(const std::string& model_path, const std::string& golden, int tp) {
  const std::string path = repo_path(model_path);
  if (!file_exists(path)) GTEST_SKIP() << path << " is not here (scripts/fetch_models.sh)";
  tp_testing::expect_split_equals_whole(tp_testing::SplitRun{path, tp, short_golden_prompts(golden), 8, false});
}

TEST(TensorParallelGoldenTest, Gemma3GgufSplitTwoWaysEqualsTheWholeModel) {
  expect_split_equals_whole("models/gemma-3-270m-q4_k_m.gguf", "gemma3", 2);
}

TEST(TensorParallelGoldenTest, Gemma3GgufSplitFourWaysEqualsTheWholeModel) {
  expect_split_equals_whole("models/gemma-3-270m-q4_k_m.gguf", "gemma3", 4);
}

TEST(TensorParallelGoldenTest, Gemma3HfSplitTwoWaysEqualsTheWholeModel) {
  expect_split_equals_whole("models/gemma3-hf", "gemma3", 2);
}

TEST(TensorParallelGoldenTest, SmolLm2GgufSplitThreeWaysEqualsTheWholeModel) {
  expect_split_equals_whole("models/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", 3);
}

}  // namespace
}  // namespace kvasir::testing
