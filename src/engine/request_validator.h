// RequestValidator: the one place a request's rules are checked against the model and the engine
// (prompt token ids in the vocabulary, a non-empty prompt shorter than max_model_len, sampling
// parameter ranges, stop_token_ids / logit_bias keys in the vocabulary, prompt + max_tokens within
// max_model_len). Engine::add_request, the HTTP server and the offline API all use it, so bad
// input gets the same message everywhere. Bad input -> Status; it must not fill in defaults.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "core/sampling_params.h"

namespace kvasir {

struct RequestLimits {
  int32_t vocab_size = 0;  // token ids must lie in [0, vocab_size)
  int max_model_len = 0;   // prompt + max_tokens must fit
  int max_logprobs = 20;   // cap on logprobs / prompt_logprobs; -1 = the vocabulary
};

class RequestValidator {
 public:
  explicit RequestValidator(const RequestLimits& limits);

  // The prompt alone, before a default max_tokens is chosen from the context it leaves: every id
  // in the vocabulary, at least one token, and room left for one output token.
  Status check_prompt(std::span<const int32_t> prompt_token_ids) const;
  // The whole request: check_prompt, then the sampling parameters (SamplingParams::validate:
  // ranges, vocabulary bounds of stop_token_ids and logit_bias, the logprobs cap), then
  // prompt + max_tokens <= max_model_len.
  Status check(std::span<const int32_t> prompt_token_ids, const SamplingParams& params) const;

  const RequestLimits& limits() const { return limits_; }

 private:
  RequestLimits limits_;
};

}  // namespace kvasir
