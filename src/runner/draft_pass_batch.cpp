#include "runner/draft_pass_batch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/check.h"

namespace kvasir {

namespace {

int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

DraftPassBatch::DraftPassBatch(const BackendCapabilities& caps, int block_size, int max_tokens, int max_sample_rows)
    : caps_(caps), block_size_(block_size), max_tokens_(max_tokens), max_sample_rows_(max_sample_rows) {
  KVASIR_CHECK(block_size_ >= 1 && max_tokens_ >= 1 && max_sample_rows_ >= 1);
  // Measurements only: the unpadded layout on the same binary, to time what the padding buys.
  const char* e = std::getenv("KVASIR_TEST_DRAFT_PASSES_UNPADDED");
  if (e != nullptr && std::strcmp(e, "1") == 0) caps_.decode_batch_buckets = false;
}

void DraftPassBatch::clear() {
  seqs_.clear();
  ids_.clear(), positions_.clear(), indices_.clear(), tags_.clear(), sample_rows_.clear(), slot_mapping_.clear();
  num_real_tokens_ = num_real_samples_ = 0;
  one_query_rows_ = false;
}

void DraftPassBatch::begin_sequence(const std::vector<int32_t>& block_ids) {
  seqs_.push_back(Sequence{&block_ids, static_cast<int>(ids_.size()), 0});
}

void DraftPassBatch::add_token(int32_t id, int32_t position, int32_t index, int32_t tag) {
  KVASIR_CHECK(!seqs_.empty());
  const std::vector<int32_t>& blocks = *seqs_.back().block_ids;
  ids_.push_back(id);
  positions_.push_back(position);
  indices_.push_back(index);
  tags_.push_back(tag);
  slot_mapping_.push_back(int64_t{blocks[static_cast<size_t>(index / block_size_)]} * block_size_ + index % block_size_);
  ++seqs_.back().num_tokens;
  ++num_real_tokens_;
}

void DraftPassBatch::end_sequence() { KVASIR_CHECK(!seqs_.empty() && seqs_.back().num_tokens > 0); }

int DraftPassBatch::sample_last_token() {
  KVASIR_CHECK(!ids_.empty());
  sample_rows_.push_back(static_cast<int32_t>(ids_.size()) - 1);
  return num_real_samples_++;
}

const ForwardBatch& DraftPassBatch::build() {
  KVASIR_CHECK_MSG(num_real_tokens_ == static_cast<int>(ids_.size()), "build() once per pass");
  const int n = num_real_tokens_;
  bool short_runs = true;
  for (const Sequence& s : seqs_) short_runs = short_runs && s.num_tokens <= kMaxOneQueryRun;
  one_query_rows_ = caps_.decode_batch_buckets && short_runs && n >= 1 && n <= max_tokens_ &&
                    num_real_samples_ <= max_sample_rows_;

  size_t width = 1;
  for (const Sequence& s : seqs_) width = std::max(width, s.block_ids->size());
  query_start_loc_.assign(1, 0);
  seq_lens_.clear();
  std::vector<const std::vector<int32_t>*>& rows = seq_blocks_;
  rows.clear();
  if (one_query_rows_) {
    width = static_cast<size_t>(next_pow2(static_cast<int>(width)));
    for (const Sequence& s : seqs_) {
      for (int t = s.first_token; t < s.first_token + s.num_tokens; ++t) {
        query_start_loc_.push_back(t + 1);
        seq_lens_.push_back(indices_[static_cast<size_t>(t)] + 1);
        rows.push_back(s.block_ids);
      }
    }
    const int padded = caps_.decode_bucket(n, max_tokens_);
    for (int t = n; t < padded; ++t) {
      ids_.push_back(0);
      positions_.push_back(0);
      slot_mapping_.push_back(-1);
      tags_.push_back(tags_[0]);
      query_start_loc_.push_back(t + 1);
      seq_lens_.push_back(1);
      rows.push_back(nullptr);  // the null block
    }
    if (num_real_samples_ > 0) {
      const int padded_samples = caps_.decode_bucket(num_real_samples_, max_sample_rows_);
      sample_rows_.resize(static_cast<size_t>(padded_samples), 0);
    }
  } else {
    for (const Sequence& s : seqs_) {
      query_start_loc_.push_back(s.first_token + s.num_tokens);
      seq_lens_.push_back(indices_[static_cast<size_t>(s.first_token + s.num_tokens - 1)] + 1);
      rows.push_back(s.block_ids);
    }
  }
  block_tables_.assign(rows.size() * width, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] != nullptr) {
      std::copy(rows[i]->begin(), rows[i]->end(), block_tables_.begin() + static_cast<std::ptrdiff_t>(i * width));
    }
  }
  batch_ = ForwardBatch{};
  batch_.num_tokens = static_cast<int>(ids_.size());
  batch_.input_ids = ids_.data();
  batch_.positions = positions_.data();
  batch_.attn.num_seqs = static_cast<int>(rows.size());
  batch_.attn.num_tokens = batch_.num_tokens;
  batch_.attn.query_start_loc = query_start_loc_.data();
  batch_.attn.seq_lens = seq_lens_.data();
  batch_.attn.block_tables = block_tables_.data();
  batch_.attn.max_blocks_per_seq = static_cast<int>(width);
  batch_.attn.slot_mapping = slot_mapping_.data();
  batch_.attn.block_size = block_size_;
  return batch_;
}

}  // namespace kvasir
