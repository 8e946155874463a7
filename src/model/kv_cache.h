// KvCache: the paged K/V storage of one model on one backend: per layer, two tensors
// [num_blocks, block_size, num_kv_heads, head_dim]. Allocated once at start from what the
// memory budget allows; block ids from kv/ index its first dimension. Holds no bookkeeping.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace kvasir {

struct KvCache {
  int num_blocks = 0;
  int block_size = 0;
  std::vector<Tensor> k;  // [num_layers] of [num_blocks, block_size, kv_heads, head_dim]
  std::vector<Tensor> v;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

}  // namespace kvasir
