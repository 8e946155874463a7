#include "runner/contiguous_batch.h"

#include "common/check.h"

namespace kvasir {

ContiguousBatch::ContiguousBatch(int num_seqs, int max_seq_len, int block_size)
    : num_seqs_(num_seqs),
      blocks_per_seq_((max_seq_len + block_size - 1) / block_size),
      block_size_(block_size),
      max_seq_len_(max_seq_len),
      seq_lens_(static_cast<size_t>(num_seqs), 0) {}

const ForwardBatch& ContiguousBatch::build(const std::vector<std::vector<int32_t>>& new_tokens, bool all_logits,
                                           bool one_query_rows) {
  all_logits = all_logits || one_query_rows;
  KVASIR_CHECK(static_cast<int>(new_tokens.size()) == num_seqs_);
  ids_.clear(), positions_.clear(), slot_mapping_.clear(), query_start_loc_.assign(1, 0);
  step_seq_lens_.clear(), block_tables_.clear(), logits_indices_.clear();
  step_seqs_.clear(), step_counts_.clear();
  logits_row_of_seq_.assign(static_cast<size_t>(num_seqs_), -1);
  for (int s = 0; s < num_seqs_; ++s) {
    const auto& toks = new_tokens[static_cast<size_t>(s)];
    if (toks.empty()) continue;
    const int start = seq_lens_[static_cast<size_t>(s)];
    KVASIR_CHECK(start + static_cast<int>(toks.size()) <= max_seq_len_);
    for (size_t i = 0; i < toks.size(); ++i) {
      const int pos = start + static_cast<int>(i);
      if (all_logits) logits_indices_.push_back(static_cast<int32_t>(ids_.size()));
      ids_.push_back(toks[i]);
      positions_.push_back(pos);
      const int64_t block = int64_t{s} * blocks_per_seq_ + pos / block_size_;
      slot_mapping_.push_back(block * block_size_ + pos % block_size_);
      if (one_query_rows) add_attention_seq(s, pos + 1);
    }
    if (!all_logits) logits_indices_.push_back(static_cast<int32_t>(ids_.size()) - 1);
    logits_row_of_seq_[static_cast<size_t>(s)] = static_cast<int>(logits_indices_.size()) - 1;
    if (!one_query_rows) add_attention_seq(s, start + static_cast<int32_t>(toks.size()));
    step_seqs_.push_back(s);
    step_counts_.push_back(static_cast<int>(toks.size()));
  }
  batch_ = ForwardBatch{};
  batch_.num_tokens = static_cast<int>(ids_.size());
  batch_.input_ids = ids_.data();
  batch_.positions = positions_.data();
  batch_.attn.num_seqs = static_cast<int>(query_start_loc_.size()) - 1;
  batch_.attn.num_tokens = batch_.num_tokens;
  batch_.attn.query_start_loc = query_start_loc_.data();
  batch_.attn.seq_lens = step_seq_lens_.data();
  batch_.attn.block_tables = block_tables_.data();
  batch_.attn.max_blocks_per_seq = blocks_per_seq_;
  batch_.attn.slot_mapping = slot_mapping_.data();
  batch_.attn.block_size = block_size_;
  batch_.num_logits = static_cast<int>(logits_indices_.size());
  batch_.logits_indices = logits_indices_.data();
  return batch_;
}

void ContiguousBatch::add_attention_seq(int s, int32_t seq_len) {
  query_start_loc_.push_back(static_cast<int32_t>(ids_.size()));
  step_seq_lens_.push_back(seq_len);
  for (int b = 0; b < blocks_per_seq_; ++b) block_tables_.push_back(s * blocks_per_seq_ + b);
}

void ContiguousBatch::commit() {
  for (size_t i = 0; i < step_seqs_.size(); ++i) seq_lens_[static_cast<size_t>(step_seqs_[i])] += step_counts_[i];
}

}  // namespace kvasir
