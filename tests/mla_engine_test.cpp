// The paged latent KV cache of multi-head latent attention (DeepSeek) through the whole engine:
// chunked prefill, a prefix-cache hit and preemption give the same greedy tokens and logprobs as
// one unchunked, uncached pass. The tiny DeepSeek-V2-Lite and V3 configs of tests/data/tiny (MLA,
// and MoE layers after the first: V2-Lite's softmax routing with shared experts, V3's sigmoid
// routing with a correction bias and a group choice, so a token's experts must not depend on its
// batch either) with dummy weights (the comparison is engine against engine, so any weights do;
// the models themselves are checked against transformers by tiny_model_golden_test); prompts are
// token ids.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "setup/loaded_model.h"
#include "token_prompt_util.h"

namespace kvasir::testing {
namespace {

struct TinyDeepseek {
  const char* dir;
  int num_layers;
};
const TinyDeepseek kModels[] = {{"tests/data/tiny/deepseek_v2_lite", 2}, {"tests/data/tiny/deepseek_v3", 3}};

EngineArgs args(const char* dir, int max_num_batched_tokens, bool prefix_caching,
                int64_t kv_bytes = int64_t{8} << 20) {
  EngineArgs ea;
  ea.model = repo_path(dir);
  ea.load_format = "dummy";
  ea.exact_matmul = true;
  ea.max_num_seqs = 4;
  ea.max_num_batched_tokens = max_num_batched_tokens;
  ea.enable_prefix_caching = prefix_caching;
  ea.kv_cache_memory = kv_bytes;
  return ea;
}

using Output = GreedyOutput;

std::vector<int32_t> prompt(int len, int salt) { return salted_prompt(len, salt); }

std::vector<Output> generate(LLM& llm, const std::vector<std::vector<int32_t>>& prompts) {
  return generate_greedy(llm, prompts, /*max_tokens=*/8);
}

class MlaEngine : public ::testing::TestWithParam<TinyDeepseek> {};

TEST_P(MlaEngine, ChunkedPrefillAndPrefixHitsGiveTheUnchunkedOutputs) {
  const char* dir = GetParam().dir;
  // Two prompts sharing their first 32 tokens (two full blocks of 16), then different tails.
  const std::vector<std::vector<int32_t>> prompts = {prompt(45, 1), prompt(41, 2)};

  auto plain = LLM::create(args(dir, 256, false));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  // The latent cache: per block, each layer keeps 16 rows of kv_lora_rank + rope dims floats.
  const LoadedModel& lm = (*plain)->model();
  EXPECT_EQ(lm.model->kv_cache_bytes_per_block(16),
            static_cast<size_t>(GetParam().num_layers) * 16 * (16 + 8) * sizeof(float));
  EXPECT_EQ(lm.config.family_params.count("num_experts"), 1u) << dir << " has no MoE layers";
  std::vector<Output> want;
  for (const auto& p : prompts) want.push_back(generate(**plain, {p})[0]);

  // Chunks of 7 tokens; the second prompt runs after the first, so its shared blocks are hits.
  auto chunked = LLM::create(args(dir, 7, true));
  ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
  const Output first = generate(**chunked, {prompts[0]})[0];
  const Output second = generate(**chunked, {prompts[1]})[0];
  EXPECT_EQ(second.num_cached_tokens, 32);
  EXPECT_GT((*chunked)->engine().metrics().prefix_cache_hits.load(), 0);
  EXPECT_EQ(first.tokens, want[0].tokens);
  EXPECT_EQ(first.logprobs, want[0].logprobs);
  EXPECT_EQ(second.tokens, want[1].tokens);
  EXPECT_EQ(second.logprobs, want[1].logprobs);
}

TEST_P(MlaEngine, PreemptionUnderATinyLatentCacheGivesTheSameOutputs) {
  const char* dir = GetParam().dir;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(prompt(30 + 5 * i, 3 + i));
  auto roomy = LLM::create(args(dir, 64, false));
  ASSERT_TRUE(roomy.ok()) << roomy.status().to_string();
  std::vector<Output> want;
  for (const auto& p : prompts) want.push_back(generate(**roomy, {p})[0]);
  // A sequence of up to 53 tokens needs at most 4 blocks, any two together 6 or more: 6 blocks
  // (one the null block) hold one but force preemptions as soon as two overlap, however the
  // requests' arrival interleaves with the engine's steps.
  const int64_t per_block = static_cast<int64_t>((*roomy)->model().model->kv_cache_bytes_per_block(16));
  auto tight = LLM::create(args(dir, 64, false, per_block * 6));
  ASSERT_TRUE(tight.ok()) << tight.status().to_string();
  const std::vector<Output> got = generate(**tight, prompts);
  ASSERT_EQ(got.size(), prompts.size());
  EXPECT_GT((*tight)->engine().metrics().num_preemptions.load(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << i;
  }
}

// The latent cache has no FP8 form: --kv-cache-dtype fp8 is refused naming MLA, never run in float.
TEST_P(MlaEngine, Fp8KvCacheIsRefusedByName) {
  for (const char* dtype : {"fp8", "fp8_e5m2"}) {
    EngineArgs ea = args(GetParam().dir, 64, true);
    ea.kv_cache_dtype = dtype;
    auto llm = LLM::create(ea);
    ASSERT_FALSE(llm.ok()) << dtype;
    EXPECT_NE(llm.status().message().find("not supported for MLA models"), std::string::npos) << llm.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(TinyDeepseek, MlaEngine, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<TinyDeepseek>& info) {
                           return std::string(info.param.dir).substr(sizeof("tests/data/tiny/") - 1);
                         });

}  // namespace
}  // namespace kvasir::testing
