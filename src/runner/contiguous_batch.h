// ContiguousBatch: builds ForwardBatch inputs for a fixed set of sequences whose KV blocks are
// laid out back to back (sequence s owns blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq)).
// For model tests and `kvasir bench latency`, where no scheduler is involved; the engine builds
// its batches from SchedulerOutput instead. Owns the host arrays the ForwardBatch points into.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_batch.h"

namespace kvasir {

class ContiguousBatch {
 public:
  ContiguousBatch(int num_seqs, int max_seq_len, int block_size);
  int num_blocks_needed() const { return num_seqs_ * blocks_per_seq_; }

  // Schedules new_tokens[s] for each sequence s (empty = skip it this step); every sequence
  // with tokens gets its last token's logits. Call commit() after the forward pass.
  // one_query_rows: every token is its own attention sequence whose context ends at it, and gets
  // logits (the layout of a verify step on a GPU: a pure decode step, see ModelRunner); the same
  // causal attention as one multi-token query per sequence.
  const ForwardBatch& build(const std::vector<std::vector<int32_t>>& new_tokens, bool all_logits = false,
                            bool one_query_rows = false);
  void commit();
  int seq_len(int s) const { return seq_lens_[static_cast<size_t>(s)]; }
  // Row of logits for sequence s in the last batch, -1 if it was not scheduled.
  const std::vector<int>& logits_row_of_seq() const { return logits_row_of_seq_; }

 private:
  // Ends an attention sequence at the tokens added so far, over sequence s's blocks.
  void add_attention_seq(int s, int32_t seq_len);
  int num_seqs_, blocks_per_seq_, block_size_, max_seq_len_;
  std::vector<int32_t> seq_lens_;  // committed context length per sequence
  std::vector<int32_t> ids_, positions_, query_start_loc_, step_seq_lens_, block_tables_, logits_indices_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int> step_seqs_, step_counts_, logits_row_of_seq_;  // step_*: per scheduled sequence
  ForwardBatch batch_;
};

}  // namespace kvasir
