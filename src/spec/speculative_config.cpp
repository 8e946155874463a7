#include "spec/speculative_config.h"

#include <algorithm>

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
  for (const char* name : {"mtp", "medusa", "mlp_speculator", "deepseek_mtp"}) {
    if (m == name) return true;
  }
  return false;
}

// A JSON number (integer or not) as a double.
StatusOr<double> number(const Json& v, const std::string& key) {
  if (v.is_int()) return static_cast<double>(v.as_int());
  if (!v.is_number()) return field_error("'" + key + "' must be a number");
  return v.as_double();
}

constexpr const char* kMethods =
    "the supported methods are \"ngram\", \"suffix\", \"draft_model\", \"eagle\" and \"eagle3\"";

// Methods whose 'model' is a checkpoint the runner loads (a draft model, an EAGLE-1/2 or EAGLE-3 head).
bool method_takes_model(const std::string& m) { return m == "draft_model" || m == "eagle" || m == "eagle3"; }

}  // namespace

StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& json_text) {
  auto j = parse_json(json_text);
  if (!j.ok() || !j->is_object()) return field_error("must be a JSON object");
  SpeculativeConfig c;
  bool has_num = false, has_min = false, has_max = false;
  bool model_is_ngram = false, has_draft_tp = false;
  std::string suffix_key;  // a suffix_decoding_* key that was given (only the suffix method reads them)
  for (const auto& [key_, v_] : j->as_object()) {
    const std::string& key = key_;  // named copies: clang before 16 cannot capture bindings
    const Json& v = v_;
    if (key == "method") {
      if (!v.is_string()) return field_error("'method' must be a string");
      c.method = v.as_string();
    } else if (key == "model") {
      // vLLM's older spelling of the n-gram method; any other model is a draft model (vLLM infers
      // method "draft_model" when 'method' is left out).
      if (!v.is_string()) return field_error("'model' must be a string");
      if (v.as_string() == "[ngram]" || v.as_string() == "ngram") {
        model_is_ngram = true;
      } else {
        if (v.as_string().empty()) return field_error("'model' must not be empty");
        c.draft_model = v.as_string();
      }
    } else if (key == "draft_tensor_parallel_size") {
      if (!v.is_int()) return field_error("'draft_tensor_parallel_size' must be an integer");
      if (v.as_int() != 1) {
        return field_error("'draft_tensor_parallel_size' " + std::to_string(v.as_int()) +
                           " is not supported: the draft model runs unsharded (1)");
      }
      has_draft_tp = true;
    } else if (key == "num_speculative_tokens") {
      KVASIR_ASSIGN_OR_RETURN(c.num_speculative_tokens, small_positive_int(v, key));
      has_num = true;
    } else if (key == "prompt_lookup_min") {
      KVASIR_ASSIGN_OR_RETURN(c.prompt_lookup_min, small_positive_int(v, key));
      has_min = true;
    } else if (key == "prompt_lookup_max") {
      KVASIR_ASSIGN_OR_RETURN(c.prompt_lookup_max, small_positive_int(v, key));
      has_max = true;
    } else if (key == "suffix_decoding_max_tree_depth") {
      if (!v.is_int() || v.as_int() < 1 || v.as_int() > kMaxSuffixTreeDepth) {
        return field_error("'" + key + "' must be an integer in [1, " + std::to_string(kMaxSuffixTreeDepth) + "]");
      }
      c.suffix.max_tree_depth = static_cast<int>(v.as_int());
      suffix_key = key;
    } else if (key == "suffix_decoding_max_cached_requests") {
      if (!v.is_int() || v.as_int() < 0 || v.as_int() > (int64_t{1} << 30)) {
        return field_error("'" + key + "' must be an integer in [0, 2^30]");
      }
      c.suffix.max_cached_requests = static_cast<int>(v.as_int());
      suffix_key = key;
    } else if (key == "suffix_decoding_max_spec_factor") {
      KVASIR_ASSIGN_OR_RETURN(c.suffix.max_spec_factor, number(v, key));
      suffix_key = key;
    } else if (key == "suffix_decoding_min_token_prob") {
      KVASIR_ASSIGN_OR_RETURN(c.suffix.min_token_prob, number(v, key));
      suffix_key = key;
    } else {
      return field_error("'" + key +
                         "' is not supported (method, model, draft_tensor_parallel_size, num_speculative_tokens, prompt_lookup_min, "
                         "prompt_lookup_max, suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests, "
                         "suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob)");
    }
  }
  if (c.method.empty() && model_is_ngram) c.method = "ngram";
  if (c.method.empty() && !c.draft_model.empty()) c.method = "draft_model";
  if (c.method.empty()) return field_error(std::string("'method' is required; ") + kMethods);
  if (is_known_unbuilt_method(c.method)) {
    return field_error("method \"" + c.method + "\" is not supported yet; " + kMethods);
  }
  if (c.method != "ngram" && c.method != "suffix" && !method_takes_model(c.method)) {
    return field_error("unknown method \"" + c.method + "\"; " + kMethods);
  }
  if (!method_takes_model(c.method) && !c.draft_model.empty()) {
    return field_error("'model' (\"" + c.draft_model + "\") names a draft model, which only the \"draft_model\", \"eagle\" and \"eagle3\" methods use");
  }
  if (!method_takes_model(c.method) && has_draft_tp) {
    return field_error("'draft_tensor_parallel_size' belongs to the \"draft_model\", \"eagle\" and \"eagle3\" methods");
  }
  if (method_takes_model(c.method)) {
    const std::string m = "\"" + c.method + "\"";
    if (model_is_ngram) return field_error("'model' \"ngram\" names the ngram method, not a " + m + " checkpoint");
    if (c.draft_model.empty()) {
      return field_error("method " + m + " needs 'model': " +
                         (c.method == "eagle3"  ? std::string("the EAGLE-3 head's HF directory (or its config.json with --load-format dummy)")
                          : c.method == "eagle" ? std::string("the EAGLE-1/2 head's HF directory (or its config.json with --load-format dummy)")
                                               : std::string("the draft's .gguf file or HF directory")));
    }
    if (has_min || has_max) return field_error("prompt_lookup_min/max belong to the \"ngram\" method, not " + m);
    if (!suffix_key.empty()) return field_error("'" + suffix_key + "' belongs to the \"suffix\" method, not " + m);
    if (!has_num) return field_error("'num_speculative_tokens' is required");
    return c;
  }
  if (c.method == "suffix") {
    if (has_min || has_max) return field_error("prompt_lookup_min/max belong to the \"ngram\" method, not \"suffix\"");
    // vLLM's default for suffix decoding: as many drafts as the tree is deep.
    if (!has_num) c.num_speculative_tokens = std::min(c.suffix.max_tree_depth, kMaxSpeculativeTokens);
    c.suffix.num_speculative_tokens = c.num_speculative_tokens;
    const Status s = c.suffix.validate();
    if (!s.ok()) return field_error(s.message());
    return c;
  }
  if (!suffix_key.empty()) return field_error("'" + suffix_key + "' belongs to the \"suffix\" method, not \"ngram\"");
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
