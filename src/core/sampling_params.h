// SamplingParams: what one request asks of the sampler and the stop checks, in vLLM's names.
// Plain data; validate() turns out-of-range values into a Status naming the field, so the server
// and the offline API reject bad input the same way. Must not know about tensors or the vocab.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/structured_output_spec.h"

namespace kvasir {

struct SamplingParams {
  int n = 1;
  float temperature = 1.0f;     // 0 = greedy
  float top_p = 1.0f;           // (0, 1]
  int top_k = 0;                // 0 or -1 = off
  float min_p = 0.0f;           // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  std::optional<uint64_t> seed;

  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;

  std::optional<int> logprobs;         // top-N logprobs of each generated token
  std::optional<int> prompt_logprobs;  // top-N logprobs of each prompt token

  // Constrains the output to a grammar (vLLM: structured_outputs); compiled by structured/.
  std::optional<StructuredOutputSpec> structured_outputs;

  bool greedy() const { return temperature == 0.0f; }

  // Checks ranges; vocab_size bounds logit_bias and stop_token_ids; max_logprobs caps logprobs.
  Status validate(int32_t vocab_size, int max_logprobs = 20) const;
};

}  // namespace kvasir
