// The generic readers of ModelConfig: every key that all decoder families share, read from GGUF
// metadata or an HF config.json, with the per-family differences passed in as ConfigTraits (named
// facts a family states about its files). Which family a file belongs to, and the keys only one
// family reads, are decided above this library, by the model registry (model/registry.h). Must not
// name any family.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "config/model_config.h"

namespace kvasir {

class GgufFile;

// Which layers use sliding-window attention when the file does not list them per layer.
enum class SlidingLayers {
  kNone,                // never (a window in the file is ignored)
  kAll,                 // every layer when sliding_window > 0 (mistral, phi3)
  kPeriodic,            // layer i is global iff (i + 1) % sliding_period == 0 (gemma2/3)
  kAfterMaxWindowLayer  // HF use_sliding_window + max_window_layers (qwen2/3)
};

// What a family says about its files, beyond the keys every family shares. The defaults describe
// a plain llama-style decoder.
struct ConfigTraits {
  std::string_view family;                    // becomes ModelConfig::architecture
  Activation activation = Activation::kSilu;  // HF default when hidden_act is absent
  bool gelu_means_tanh = false;    // HF "gelu" is run as the tanh form (Gemma overrides it)
  bool scale_embeddings = false;   // embeddings * sqrt(hidden_size) (Gemma)
  bool hf_norm_plus_one = false;   // HF norms store w and compute x * (1 + w) (Gemma)
  bool post_block_norms = false;   // RMSNorm after attention and after the MLP (gemma2/3)
  bool qk_norm = false;            // per-head RMSNorm of q and k (gemma3, qwen3)
  bool attention_bias = false;     // HF default when config.json does not say
  bool attention_bias_always = false;  // the family hard-codes q/k/v biases (qwen2)
  bool tie_embeddings = false;     // HF default when config.json does not say
  SlidingLayers sliding = SlidingLayers::kNone;
  int sliding_period = 0;                 // kPeriodic
  bool sliding_period_in_config = false;  // HF (_)sliding_window_pattern may change the period
  RopeStyle gguf_rope_style = RopeStyle::kNeox;  // llama.cpp permutes llama-family Q/K rows
  double rope_theta = 10000.0;                   // HF default when rope_theta is absent
  // Sliding layers' own RoPE base (gemma3: 10000, unscaled); unset: they share the global one.
  std::optional<double> rope_theta_local;
  // GGUF has no query_pre_attn_scalar: at this layer count (gemma2/3 27B) it is hidden / heads.
  int large_model_layers = 0;
  // GGUF attention.key_length / value_length describe multi-head latent attention's latent view
  // (llama.cpp's deepseek2: kv_lora_rank + rope dims, kv_lora_rank), so they may differ; the
  // family reads the per-head sizes from its own keys.
  bool latent_attention = false;
};

// model_type and architectures of an HF config.json (the text_config's when a multimodal
// wrapper holds one), for the registry to find the family.
struct HfModelId {
  std::string model_type;
  std::vector<std::string> architectures;
};
StatusOr<HfModelId> hf_model_id(const Json& config);

// The object holding the text model's keys: config.text_config when present, else config.
const Json& hf_text_config(const Json& config);

// The shared keys of an HF config.json (+ generation_config.json). Does not validate: the caller
// lets the family read its own keys first, then calls ModelConfig::validate().
StatusOr<ModelConfig> read_hf_config(const Json& config, const Json* generation_config,
                                     const ConfigTraits& traits);
// The shared keys of GGUF metadata under `arch.` (general.architecture). Does not validate.
StatusOr<ModelConfig> read_gguf_config(const GgufFile& file, const ConfigTraits& traits);

// <dir>/config.json and the optional <dir>/generation_config.json, parsed.
struct HfConfigFiles {
  Json config;
  std::optional<Json> generation_config;
};
StatusOr<HfConfigFiles> read_hf_config_files(const std::string& dir);

}  // namespace kvasir
