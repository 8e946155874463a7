#include "server/sampling_json.h"

#include <cmath>
#include <limits>

namespace kvasir {
namespace {

Status want_number(const Json& v, const char* name, double* out) {
  if (!v.is_number()) return invalid_argument(std::string("'") + name + "' must be a number");
  *out = v.as_double();
  if (!std::isfinite(*out)) return invalid_argument(std::string("'") + name + "' must be finite");
  return Status();
}

Status out_of_range_int(const char* name, int64_t lo, int64_t hi) {
  return invalid_argument(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

Status want_int(const Json& v, const char* name, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number()) return invalid_argument(std::string("'") + name + "' must be an integer");
  double d = v.as_double();
  if (!std::isfinite(d) || std::floor(d) != d) return invalid_argument(std::string("'") + name + "' must be an integer");
  // As a double, INT64_MAX rounds up to 2^63, which does not convert back to int64 (UB): doubles
  // are range-checked against 2^63 first, and the converted integer against [lo, hi].
  constexpr double kTwo63 = 9223372036854775808.0;
  if (!v.is_int() && !(d >= -kTwo63 && d < kTwo63)) return out_of_range_int(name, lo, hi);
  const int64_t n = v.is_int() ? v.as_int() : static_cast<int64_t>(d);
  if (n < lo || n > hi) return out_of_range_int(name, lo, hi);
  *out = n;
  return Status();
}

Status want_bool(const Json& v, const char* name, bool* out) {
  if (!v.is_bool()) return invalid_argument(std::string("'") + name + "' must be a boolean");
  *out = v.as_bool();
  return Status();
}

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

}  // namespace

Status apply_sampling_json(const Json& obj, SamplingParams* p, bool chat_logprobs) {
  if (!obj.is_object()) return invalid_argument("request must be a JSON object");
  double d = 0;
  int64_t i = 0;
  for (const auto& [key, v] : obj.as_object()) {
    if (v.is_null()) continue;  // OpenAI clients send explicit nulls for "not set"
    const char* k = key.c_str();
    if (key == "n") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->n = static_cast<int>(i);
    } else if (key == "temperature") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->temperature = static_cast<float>(d);
    } else if (key == "top_p") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->top_p = static_cast<float>(d);
    } else if (key == "top_k") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->top_k = static_cast<int>(i);
    } else if (key == "min_p") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->min_p = static_cast<float>(d);
    } else if (key == "repetition_penalty") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->repetition_penalty = static_cast<float>(d);
    } else if (key == "presence_penalty") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->presence_penalty = static_cast<float>(d);
    } else if (key == "frequency_penalty") {
      KVASIR_RETURN_IF_ERROR(want_number(v, k, &d));
      p->frequency_penalty = static_cast<float>(d);
    } else if (key == "seed") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &i));
      p->seed = static_cast<uint64_t>(i);
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->max_tokens = static_cast<int>(i);
    } else if (key == "min_tokens") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->min_tokens = static_cast<int>(i);
    } else if (key == "ignore_eos") {
      KVASIR_RETURN_IF_ERROR(want_bool(v, k, &p->ignore_eos));
    } else if (key == "include_stop_str_in_output") {
      KVASIR_RETURN_IF_ERROR(want_bool(v, k, &p->include_stop_str_in_output));
    } else if (key == "skip_special_tokens") {
      KVASIR_RETURN_IF_ERROR(want_bool(v, k, &p->skip_special_tokens));
    } else if (key == "stop") {
      p->stop.clear();
      if (v.is_string()) {
        p->stop.push_back(v.as_string());
      } else if (v.is_array()) {
        for (const Json& s : v.as_array()) {
          if (!s.is_string()) return invalid_argument("'stop' must be a string or a list of strings");
          p->stop.push_back(s.as_string());
        }
      } else {
        return invalid_argument("'stop' must be a string or a list of strings");
      }
    } else if (key == "stop_token_ids") {
      if (!v.is_array()) return invalid_argument("'stop_token_ids' must be a list of integers");
      p->stop_token_ids.clear();
      for (const Json& t : v.as_array()) {
        KVASIR_RETURN_IF_ERROR(want_int(t, "stop_token_ids", -kIntMax, kIntMax, &i));
        p->stop_token_ids.push_back(static_cast<int32_t>(i));
      }
    } else if (key == "logit_bias") {
      if (!v.is_object()) return invalid_argument("'logit_bias' must be an object mapping token ids to numbers");
      p->logit_bias.clear();
      for (const auto& [tok, bias] : v.as_object()) {
        char* end = nullptr;
        long long id = std::strtoll(tok.c_str(), &end, 10);
        if (tok.empty() || *end != '\0' || id < -kIntMax || id > kIntMax) {
          return invalid_argument("'logit_bias' keys must be token ids, got '" + tok + "'");
        }
        KVASIR_RETURN_IF_ERROR(want_number(bias, "logit_bias", &d));
        p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(d));
      }
    } else if (key == "logprobs") {
      if (chat_logprobs) {
        bool on = false;
        KVASIR_RETURN_IF_ERROR(want_bool(v, k, &on));
        if (on && !p->logprobs) p->logprobs = 0;
        if (!on) p->logprobs.reset();
      } else {
        KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
        p->logprobs = static_cast<int>(i);
      }
    } else if (key == "top_logprobs" && chat_logprobs) {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->logprobs = static_cast<int>(i);
    } else if (key == "prompt_logprobs") {
      KVASIR_RETURN_IF_ERROR(want_int(v, k, -kIntMax, kIntMax, &i));
      p->prompt_logprobs = static_cast<int>(i);
    }
  }
  if (chat_logprobs) {
    // top_logprobs only counts when logprobs is true.
    const Json* lp = obj.find("logprobs");
    if (!lp || !lp->is_bool() || !lp->as_bool()) {
      const Json* top = obj.find("top_logprobs");
      if (top && !top->is_null()) return invalid_argument("'top_logprobs' requires 'logprobs' to be true");
      p->logprobs.reset();
    }
  }
  return Status();
}

}  // namespace kvasir
