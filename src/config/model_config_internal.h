// Internal to src/config: per-family facts shared by the GGUF and HF readers of ModelConfig.
// Not for use outside src/config.
#pragma once

#include <string_view>
#include <vector>

#include "config/model_config.h"

namespace kvasir::config_detail {

struct ArchTraits {
  std::string_view family;
  Activation activation;
  bool gemma;             // embeddings scaled by sqrt(hidden); HF norms stored as w, used as 1 + w
  bool post_block_norms;  // gemma2/3 sandwich norms
  bool qk_norm;
  bool attention_bias;  // default for HF configs that do not say (qwen2 always has q/k/v bias)
  bool tie_embeddings;  // HF default when config.json does not say
  int sliding_period;   // 0: no built-in local/global alternation; n: layer i is global iff (i+1) %
                        // n == 0
  RopeStyle gguf_rope_style;
  int large_model_layers;  // gemma2/3: the 27B layer count, whose attention scale uses hidden /
                           // heads
};

// nullptr when `family` is not one we support.
const ArchTraits* find_arch(std::string_view family);
std::string supported_families();

// Layer i is sliding unless (i + 1) % period == 0; period 0 makes every layer sliding.
std::vector<bool> periodic_sliding(int64_t num_layers, int64_t period);

// Range checks of hidden_size, num_heads and num_layers, run before anything divides by them or
// allocates per layer.
Status check_basic_sizes(const ModelConfig& c);

}  // namespace kvasir::config_detail
