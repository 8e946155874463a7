// RoPE inverse-frequency tables with the scaling variants HF models use (none, linear, llama3,
// yarn, dynamic is treated as none below the original length). Computed once at load on the host;
// backends only consume the table. Must not touch tensors.
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"

namespace kvasir {

struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.0f;
};

// freq_factors: optional per-dimension divisors (GGUF "rope_freqs.weight"), [rotary_dim / 2].
RopeTable make_rope_table(double theta, int rotary_dim, const RopeScaling& scaling,
                          const std::vector<float>* freq_factors = nullptr);

}  // namespace kvasir
