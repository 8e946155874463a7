// Engine tests on tiny models without a real vocabulary (tests/data/tiny): prompts are token ids,
// outputs are compared as greedy tokens and their logprobs. Shared by mla_engine_test and
// moe_engine_test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvasir/llm.h"

namespace kvasir::testing {

// A prompt of `len` token ids below 256; prompts with different salts share their first 32 tokens
// (so the second of two hits the prefix cache).
inline std::vector<int32_t> salted_prompt(int len, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < len; ++i) ids.push_back((i * 37 + 11 + (i >= 32 ? salt * 101 : 0)) % 256);
  return ids;
}

struct GreedyOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of the chosen tokens
  int32_t num_cached_tokens = 0;
};

// Greedy generation of `max_tokens` per prompt (EOS ignored), with the chosen tokens' logprobs.
inline std::vector<GreedyOutput> generate_greedy(LLM& llm, const std::vector<std::vector<int32_t>>& prompts,
                                                 int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  sp.logprobs = 1;
  std::vector<PromptInput> in;
  for (const auto& p : prompts) in.push_back(PromptInput{"", p, std::nullopt});
  auto res = llm.generate(in, sp);
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  std::vector<GreedyOutput> out;
  if (!res.ok()) return out;
  for (const auto& r : *res) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    GreedyOutput o;
    o.tokens = r.outputs[0].token_ids;
    for (const auto& lp : r.outputs[0].logprobs) o.logprobs.push_back(lp.chosen.logprob);
    o.num_cached_tokens = r.num_cached_tokens;
    out.push_back(o);
  }
  return out;
}

}  // namespace kvasir::testing
