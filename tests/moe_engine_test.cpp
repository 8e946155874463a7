// A mixture-of-experts model through the whole engine (CPU, the default fast path): continuous
// batching, chunked prefill with prefix-cache hits, and preemption under a tiny KV cache all give
// the greedy tokens and logprobs of one request at a time, unchunked and uncached. The model is
// the GGUF form of tests/data/tiny/qwen3_moe (its logits match transformers,
// tiny_model_golden_test); prompts are token ids (the GGUF's plain vocabulary only detokenizes). Each batch composition routes different tokens together
// through the experts, so this also checks the MoE block's batch invariance end to end.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "setup/loaded_model.h"
#include "token_prompt_util.h"

namespace kvasir::testing {
namespace {

const char* kModel = "tests/data/tiny/qwen3_moe/model.gguf";

EngineArgs args(int max_num_seqs, int max_num_batched_tokens, bool prefix_caching,
                int64_t kv_bytes = int64_t{8} << 20) {
  EngineArgs ea;
  ea.model = repo_path(kModel);
  ea.max_num_seqs = max_num_seqs;
  ea.max_num_batched_tokens = max_num_batched_tokens;
  ea.enable_prefix_caching = prefix_caching;
  ea.kv_cache_memory = kv_bytes;
  return ea;
}

using Output = GreedyOutput;

std::vector<int32_t> prompt(int len, int salt) { return salted_prompt(len, salt); }

std::vector<Output> generate(LLM& llm, const std::vector<std::vector<int32_t>>& prompts) {
  return generate_greedy(llm, prompts, /*max_tokens=*/12);
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 6; ++i) p.push_back(prompt(33 + 3 * i, i + 1));  // + 12 tokens <= 64 positions
  return p;
}

// One request at a time, unchunked, no prefix cache: what every other schedule must reproduce.
std::vector<Output> reference(const std::vector<std::vector<int32_t>>& ps) {
  auto solo = LLM::create(args(1, 256, false));
  EXPECT_TRUE(solo.ok()) << solo.status().to_string();
  std::vector<Output> want;
  if (!solo.ok()) return want;
  for (const auto& p : ps) want.push_back(generate(**solo, {p})[0]);
  return want;
}

void expect_same(const std::vector<Output>& got, const std::vector<Output>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "prompt " << i;
  }
}

TEST(MoeEngine, BatchedChunkedAndPrefixCachedGiveTheOneAtATimeOutputs) {
  const auto ps = prompts();
  const std::vector<Output> want = reference(ps);
  // All at once, at most 11 tokens a step (prefills chunked, decodes joining them), prefix
  // caching on; a rerun of one prompt then hits its cached full blocks.
  auto batched = LLM::create(args(6, 11, true));
  ASSERT_TRUE(batched.ok()) << batched.status().to_string();
  expect_same(generate(**batched, ps), want);
  const Output again = generate(**batched, {ps[2]})[0];
  EXPECT_EQ(again.num_cached_tokens, 32);
  EXPECT_EQ(again.tokens, want[2].tokens);
  EXPECT_EQ(again.logprobs, want[2].logprobs);
  EXPECT_GT((*batched)->engine().metrics().prefix_cache_hits.load(), 0);
}

TEST(MoeEngine, PreemptionUnderATinyKvCacheGivesTheSameOutputs) {
  const auto ps = prompts();
  const std::vector<Output> want = reference(ps);
  auto probe = LLM::create(args(8, 256, false));
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  const int64_t per_block = static_cast<int64_t>((*probe)->model().model->kv_cache_bytes_per_block(16));
  // Six sequences of up to 60 tokens need 4 blocks each; 10 blocks force preemptions.
  auto tight = LLM::create(args(8, 256, true, per_block * 10));
  ASSERT_TRUE(tight.ok()) << tight.status().to_string();
  expect_same(generate(**tight, ps), want);
  EXPECT_GT((*tight)->engine().metrics().num_preemptions.load(), 0);
}

}  // namespace
}  // namespace kvasir::testing
