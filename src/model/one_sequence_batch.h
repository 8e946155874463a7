// Test-only: the ForwardBatch of one sequence at positions 0.. (KV blocks 0, 1, ... of 16
// slots), for model tests and fuzz targets that run a forward pass without a runner. Must not be
// used by the engine: the runner builds real batches.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_batch.h"

namespace kvasir {

// ForwardBatch of one sequence of `ids` at positions 0.. (blocks 0, 1, ... of 16 slots).
struct OneSequence {
  explicit OneSequence(std::vector<int32_t> token_ids) : ids(std::move(token_ids)) {
    const int n = static_cast<int>(ids.size());
    for (int i = 0; i < n; ++i) {
      positions.push_back(i);
      slots.push_back(i);
    }
    for (int b = 0; b * 16 < n; ++b) blocks.push_back(b);
    qsl = {0, n};
    seq_lens = {n};
    last = {n - 1};
    batch.num_tokens = n;
    batch.input_ids = ids.data();
    batch.positions = positions.data();
    batch.attn.num_seqs = 1;
    batch.attn.num_tokens = n;
    batch.attn.query_start_loc = qsl.data();
    batch.attn.seq_lens = seq_lens.data();
    batch.attn.block_tables = blocks.data();
    batch.attn.max_blocks_per_seq = static_cast<int>(blocks.size());
    batch.attn.slot_mapping = slots.data();
    batch.attn.block_size = 16;
    batch.num_logits = 1;
    batch.logits_indices = last.data();
  }
  std::vector<int32_t> ids, positions, qsl, seq_lens, blocks, last;
  std::vector<int64_t> slots;
  ForwardBatch batch;
};

}  // namespace kvasir
