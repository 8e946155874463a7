#include "model/draft_heads/head_config_keys.h"

#include <algorithm>

#include "model/registry.h"

namespace kvasir {
namespace {

// Read by model_config_from_hf_json for the head's one llama layer (each value checked there).
constexpr std::string_view kLayerKeys[] = {
    "architectures",       "model_type",         "hidden_size",  "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "num_hidden_layers",  "head_dim",     "rms_norm_eps",      "rope_theta",
    "rope_scaling",        "rope_parameters",    "vocab_size",   "max_position_embeddings",
};
// Metadata: no effect on a forward pass at inference (dropout is off, ids are the tokenizer's).
constexpr std::string_view kMetadataKeys[] = {
    "_name_or_path", "torch_dtype",  "dtype",          "transformers_version", "bos_token_id",
    "eos_token_id",  "pad_token_id", "initializer_range", "use_cache",         "attention_dropout",
};

bool in(std::string_view key, const auto& list) { return std::find(std::begin(list), std::end(list), key) != std::end(list); }

}  // namespace

Status check_head_config_keys(const Json& config, std::initializer_list<std::string_view> head_keys,
                              const std::string& what) {
  auto refuse = [&](const std::string& m) { return invalid_argument(what + ": " + m); };
  for (const auto& [key, v] : config.as_object()) {
    if (key == "attention_bias" || key == "mlp_bias") {
      if (!v.is_null() && !v.is_bool()) return refuse("'" + key + "' must be true or false");
      if (!v.is_null() && v.as_bool()) {
        return refuse("'" + key + "': true is not supported (the head's attention and MLP linears have no biases here)");
      }
    } else if (key == "hidden_act") {
      if (!v.is_string() || v.as_string() != "silu") {
        return refuse("'hidden_act' " + v.dump() + " is not supported: the head's MLP is llama's silu-gated one");
      }
    } else if (key == "sliding_window") {
      if (!v.is_null()) return refuse("'sliding_window' " + v.dump() + " is not supported: the head attends to its whole context");
    } else if (key == "pretraining_tp") {
      // HF splits its matmuls in pretraining_tp slices when > 1 (the same sums in another order).
      if (!v.is_int() || v.as_int() < 1) return refuse("'pretraining_tp' must be a positive integer");
    } else if (!in(key, kLayerKeys) && !in(key, kMetadataKeys) &&
               std::find(head_keys.begin(), head_keys.end(), key) == head_keys.end()) {
      return refuse("config.json key '" + key +
                    "' is not supported: it may change the head's computation, and Kvasir does not implement it");
    }
  }
  return Status();
}

StatusOr<int64_t> head_positive_int(const Json& config, const char* key, bool required, int64_t def,
                                    const std::string& what) {
  const Json* v = config.find(key);
  if (v == nullptr || v->is_null()) {
    if (required) return invalid_argument(what + ": config.json lacks '" + key + "'");
    return def;
  }
  if (!v->is_int() || v->as_int() < 1) return invalid_argument(what + ": '" + key + "' must be a positive integer");
  return v->as_int();
}

StatusOr<int64_t> check_head_sizes(const Json& config, const ModelConfig& target, const std::string& what) {
  KVASIR_ASSIGN_OR_RETURN(const int64_t hidden, head_positive_int(config, "hidden_size", true, 0, what));
  if (hidden != target.hidden_size) {
    return invalid_argument(what + ": hidden_size " + std::to_string(hidden) + " differs from the target's hidden_size " +
                            std::to_string(target.hidden_size) + ": the head was trained for another model");
  }
  KVASIR_ASSIGN_OR_RETURN(const int64_t vocab, head_positive_int(config, "vocab_size", false, target.vocab_size, what));
  if (vocab != target.vocab_size) {
    return invalid_argument(what + ": vocab_size " + std::to_string(vocab) + " differs from the target's " +
                            std::to_string(target.vocab_size));
  }
  return vocab;
}

StatusOr<ModelConfig> head_layer_config(Json config, int64_t vocab, const std::string& what, const std::string& kind) {
  config.set("architectures", Json(Json::Array{Json("LlamaForCausalLM")}));
  config.set("model_type", Json("llama"));
  config.set("num_hidden_layers", Json(1));
  config.set("vocab_size", Json(vocab));
  config.set("tie_word_embeddings", Json(false));
  auto layer = model_config_from_hf_json(config, nullptr);
  if (!layer.ok()) return invalid_argument(what + ": " + layer.status().message());
  if (layer->attention_bias || layer->qk_norm || layer->sliding_window != 0) {
    return invalid_argument(what + ": attention biases, QK-norm and sliding windows are not part of an " + kind);
  }
  return *layer;
}

const std::string* single_architecture(const Json& config) {
  const Json* arch = config.find("architectures");
  if (arch == nullptr || !arch->is_array() || arch->as_array().size() != 1 || !arch->as_array()[0].is_string()) {
    return nullptr;
  }
  return &arch->as_array()[0].as_string();
}

}  // namespace kvasir
