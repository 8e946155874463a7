// Internal to src/config: per-family facts shared by the GGUF and HF readers of ModelConfig.
// Not for use outside src/config.
#pragma once

#include <vector>

#include "config/model_config.h"

namespace kvasir::config_detail {

// Layer i is sliding unless (i + 1) % period == 0; period 0 makes every layer sliding.
std::vector<bool> periodic_sliding(int64_t num_layers, int64_t period);

// Range checks of hidden_size, num_heads and num_layers, run before anything divides by them or
// allocates per layer.
Status check_basic_sizes(const ModelConfig& c);

}  // namespace kvasir::config_detail
