#include "engine/request_validator.h"

#include <string>

#include "common/check.h"

namespace kvasir {

RequestValidator::RequestValidator(const RequestLimits& limits) : limits_(limits) {
  KVASIR_CHECK(limits_.vocab_size > 0);
  KVASIR_CHECK(limits_.max_model_len > 0);
}

// The messages follow vLLM's OpenAI server, word for word where it has one.
Status RequestValidator::check_prompt(std::span<const int32_t> prompt) const {
  const int32_t vocab = limits_.vocab_size;
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("Token id " + std::to_string(id) + " in the prompt is out of vocabulary [0, " +
                              std::to_string(vocab) + ").");
    }
  }
  if (prompt.empty()) return invalid_argument("The prompt is empty: it must contain at least one token.");
  const auto len = static_cast<int64_t>(prompt.size());
  const int max_len = limits_.max_model_len;
  if (len >= max_len) {
    return invalid_argument("This model's maximum context length is " + std::to_string(max_len) +
                            " tokens. However, your request has " + std::to_string(len) +
                            " input tokens. Please reduce the length of the input messages.");
  }
  return Status();
}

Status RequestValidator::check(std::span<const int32_t> prompt, const SamplingParams& params) const {
  KVASIR_RETURN_IF_ERROR(check_prompt(prompt));
  KVASIR_RETURN_IF_ERROR(params.validate(limits_.vocab_size, limits_.max_logprobs));
  const auto len = static_cast<int64_t>(prompt.size());
  const int max_len = limits_.max_model_len;
  if (len + params.max_tokens > max_len) {
    return invalid_argument("This model's maximum context length is " + std::to_string(max_len) +
                            " tokens. However, you requested " + std::to_string(len + params.max_tokens) + " tokens (" +
                            std::to_string(len) + " in the messages, " + std::to_string(params.max_tokens) +
                            " in the completion). Please reduce the length of the messages or completion.");
  }
  return Status();
}

}  // namespace kvasir
