// KvCache: the paged KV storage of one model on one backend. Each layer states the shape of what
// it keeps per token (KvCacheShape, from its attention block): the generic attention K and V of
// num_kv_heads x head_dim; MLA (DeepSeek) one latent row [kv_lora_rank + rope_dim] and no V.
// Allocated once at start from what the memory budget allows; block ids from kv/ index every
// layer's first dimension, whatever its shape, so the KV manager only counts blocks. Holds no
// bookkeeping.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace kvasir {

// What one layer caches per token: K rows of k_heads x k_dim and V rows of v_heads x v_dim
// (v_heads == 0: the layer keeps no V tensor).
struct KvCacheShape {
  int64_t k_heads = 0, k_dim = 0;
  int64_t v_heads = 0, v_dim = 0;
  bool has_v() const { return v_heads > 0; }
};

// The cache_scale a layer's new K or V cache tensor starts with: 1 unless the cache holds FP8 codes;
// then 0 ("not yet known") under --calculate-kv-scales (Backend::calculates_kv_scales: the first
// write sets it), else the checkpoint's scale (1.0 where it has none).
inline float initial_kv_cache_scale(const Backend& backend, float checkpoint_scale) {
  if (!is_fp8(backend.kv_cache_dtype())) return 1.0f;  // float caches keep exact values
  return backend.calculates_kv_scales() ? 0.0f : checkpoint_scale;
}

struct KvCache {
  int num_blocks = 0;
  int block_size = 0;
  std::vector<Tensor> k;  // [num_layers] of [num_blocks, block_size, k_heads, k_dim]
  std::vector<Tensor> v;  // [num_layers] of [num_blocks, block_size, v_heads, v_dim]; empty if none
  std::vector<std::unique_ptr<Buffer>> buffers;
};

}  // namespace kvasir
