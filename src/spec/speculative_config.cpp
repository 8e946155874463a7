#include "spec/speculative_config.h"

#include "common/json.h"

namespace kvasir {
namespace {

constexpr const char* kPrefix = "--speculative-config: ";

Status field_error(const std::string& m) { return invalid_argument(kPrefix + m); }

// A positive integer in [1, kMaxSpeculativeTokens]; JSON floats with an integral value are refused
// as vLLM's pydantic model does for ints given as 2.5 (and we refuse 2.0 too: it is not an int).
StatusOr<int> small_positive_int(const Json& v, const std::string& key) {
  if (!v.is_int()) return field_error("'" + key + "' must be an integer");
  const int64_t x = v.as_int();
  if (x < 1 || x > kMaxSpeculativeTokens) {
    return field_error("'" + key + "' must be in [1, " + std::to_string(kMaxSpeculativeTokens) + "], got " +
                       std::to_string(x));
  }
  return static_cast<int>(x);
}

bool is_known_unbuilt_method(const std::string& m) {
  for (const char* name : {"draft_model", "eagle", "eagle3", "mtp", "suffix", "medusa", "mlp_speculator",
                           "deepseek_mtp"}) {
    if (m == name) return true;
  }
  return false;
}

}  // namespace

StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& json_text) {
  auto j = parse_json(json_text);
  if (!j.ok() || !j->is_object()) return field_error("must be a JSON object");
  SpeculativeConfig c;
  bool has_num = false, has_min = false, has_max = false;
  for (const auto& [key_, v_] : j->as_object()) {
    const std::string& key = key_;  // named copies: clang before 16 cannot capture bindings
    const Json& v = v_;
    if (key == "method") {
      if (!v.is_string()) return field_error("'method' must be a string");
      c.method = v.as_string();
    } else if (key == "model") {
      // vLLM's older spelling of the n-gram method; any other model is a draft model.
      if (!v.is_string()) return field_error("'model' must be a string");
      if (v.as_string() == "[ngram]" || v.as_string() == "ngram") {
        if (c.method.empty()) c.method = "ngram";
      } else {
        return field_error("draft models ('model': \"" + v.as_string() +
                           "\") are not supported yet; the supported method is \"ngram\"");
      }
    } else if (key == "num_speculative_tokens") {
      KVASIR_ASSIGN_OR_RETURN(c.num_speculative_tokens, small_positive_int(v, key));
      has_num = true;
    } else if (key == "prompt_lookup_min") {
      KVASIR_ASSIGN_OR_RETURN(c.prompt_lookup_min, small_positive_int(v, key));
      has_min = true;
    } else if (key == "prompt_lookup_max") {
      KVASIR_ASSIGN_OR_RETURN(c.prompt_lookup_max, small_positive_int(v, key));
      has_max = true;
    } else {
      return field_error("'" + key +
                         "' is not supported (method, model, num_speculative_tokens, prompt_lookup_min, "
                         "prompt_lookup_max)");
    }
  }
  if (c.method.empty()) return field_error("'method' is required (\"ngram\")");
  if (is_known_unbuilt_method(c.method)) {
    return field_error("method \"" + c.method + "\" is not supported yet; the supported method is \"ngram\"");
  }
  if (c.method != "ngram") return field_error("unknown method \"" + c.method + "\"; the supported method is \"ngram\"");
  if (!has_num) return field_error("'num_speculative_tokens' is required");
  // vLLM's defaults: both bounds 5 when neither is given, else the one given for both.
  if (!has_min && !has_max) {
    c.prompt_lookup_min = c.prompt_lookup_max = 5;
  } else if (!has_min) {
    c.prompt_lookup_min = c.prompt_lookup_max;
  } else if (!has_max) {
    c.prompt_lookup_max = c.prompt_lookup_min;
  }
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return field_error("prompt_lookup_min (" + std::to_string(c.prompt_lookup_min) +
                       ") must be <= prompt_lookup_max (" + std::to_string(c.prompt_lookup_max) + ")");
  }
  return c;
}

}  // namespace kvasir
