// RoPE inverse-frequency tables with the scaling variants HF models use (none, linear, llama3,
// yarn, longrope; dynamic is treated as none below the original length). Computed once at load
// on the host; backends only consume the table. Must not touch tensors.
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"

namespace kvasir {

struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.0f;
  // longrope: a sequence whose length (context including this step's tokens) exceeds long_after
  // rotates with long_inv_freq instead (transformers' rule); empty for every other variant.
  std::vector<float> long_inv_freq;  // [rotary_dim / 2]
  int64_t long_after = 0;
  // The table for a sequence of `seq_len` tokens.
  const std::vector<float>& inv_freq_for(int64_t seq_len) const {
    return !long_inv_freq.empty() && seq_len > long_after ? long_inv_freq : inv_freq;
  }
};

// freq_factors: optional per-dimension divisors (GGUF "rope_freqs.weight"), [rotary_dim / 2].
RopeTable make_rope_table(double theta, int rotary_dim, const RopeScaling& scaling,
                          const std::vector<float>* freq_factors = nullptr);

}  // namespace kvasir
