#include "core/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/check.h"

namespace kvasir {
namespace {

// Sane ceilings for what one request may ask; past them a request is more likely a mistake or an
// attack than a real need, and each costs host work per step.
constexpr int kMaxN = 128;
constexpr size_t kMaxStopStrings = 128;
constexpr float kMaxAbsLogitBias = 100.0f;  // OpenAI's documented range
constexpr float kMaxAbsPenalty = 2.0f;      // OpenAI's presence/frequency range

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status field_error(const char* field, const std::string& rule, const std::string& got) {
  return invalid_argument(std::string(field) + " must be " + rule + ", got " + got + ".");
}

Status check_logprobs(const char* field, const std::optional<int>& value, int limit) {
  if (!value.has_value()) return Status::ok_status();
  if (*value < 0) return field_error(field, "non-negative", std::to_string(*value));
  if (*value > limit) {
    return invalid_argument(std::string("Requested ") + field + " of " + std::to_string(*value) +
                            ", which is greater than max allowed: " + std::to_string(limit) + ".");
  }
  return Status::ok_status();
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size, int max_logprobs) const {
  KVASIR_CHECK(vocab_size > 0);
  if (n < 1 || n > kMaxN) {
    return field_error("n", "in [1, " + std::to_string(kMaxN) + "]", std::to_string(n));
  }
  // NaN fails every comparison, so each range is written as "inside" and negated.
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return field_error("temperature", "non-negative and finite", num(temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return field_error("top_p", "in (0, 1]", num(top_p));
  if (top_k < -1) {
    return field_error("top_k", "-1 or 0 (disable), or at least 1", std::to_string(top_k));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return field_error("min_p", "in [0, 1]", num(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return field_error("repetition_penalty", "greater than zero and finite",
                       num(repetition_penalty));
  }
  if (!(presence_penalty >= -kMaxAbsPenalty && presence_penalty <= kMaxAbsPenalty)) {
    return field_error("presence_penalty", "in [-2, 2]", num(presence_penalty));
  }
  if (!(frequency_penalty >= -kMaxAbsPenalty && frequency_penalty <= kMaxAbsPenalty)) {
    return field_error("frequency_penalty", "in [-2, 2]", num(frequency_penalty));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("token_id " + std::to_string(id) +
                              " in logit_bias is out of vocabulary. Vocabulary size: " +
                              std::to_string(vocab_size) + ".");
    }
    if (!(bias >= -kMaxAbsLogitBias && bias <= kMaxAbsLogitBias)) {
      return invalid_argument("logit_bias value for token_id " + std::to_string(id) +
                              " must be in [-100, 100], got " + num(bias) + ".");
    }
  }
  if (max_tokens < 1) return field_error("max_tokens", "at least 1", std::to_string(max_tokens));
  if (min_tokens < 0) {
    return field_error("min_tokens", "greater than or equal to 0", std::to_string(min_tokens));
  }
  if (min_tokens > max_tokens) {
    return field_error("min_tokens",
                       "less than or equal to max_tokens=" + std::to_string(max_tokens),
                       std::to_string(min_tokens));
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("stop_token_ids contains out-of-vocabulary token id " +
                              std::to_string(id) +
                              ". Vocabulary size: " + std::to_string(vocab_size) + ".");
    }
  }
  if (stop.size() > kMaxStopStrings) {
    return field_error("stop", "at most " + std::to_string(kMaxStopStrings) + " strings",
                       std::to_string(stop.size()));
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop cannot contain an empty string.");
  }
  // vLLM's max_logprobs = -1 means "no cap" (up to the vocabulary).
  const int limit = max_logprobs < 0 ? vocab_size : std::min(max_logprobs, vocab_size);
  KVASIR_RETURN_IF_ERROR(check_logprobs("logprobs", logprobs, limit));
  KVASIR_RETURN_IF_ERROR(check_logprobs("prompt_logprobs", prompt_logprobs, limit));
  return Status::ok_status();
}

}  // namespace kvasir

namespace kvasir {

const char* structured_output_kind_name(StructuredOutputSpec::Kind kind) {
  switch (kind) {
    case StructuredOutputSpec::Kind::kJsonSchema: return "json";
    case StructuredOutputSpec::Kind::kJsonObject: return "json_object";
    case StructuredOutputSpec::Kind::kRegex: return "regex";
    case StructuredOutputSpec::Kind::kChoice: return "choice";
    case StructuredOutputSpec::Kind::kGrammar: return "grammar";
    case StructuredOutputSpec::Kind::kStructuralTag: return "structural_tag";
  }
  return "unknown";
}

}  // namespace kvasir
