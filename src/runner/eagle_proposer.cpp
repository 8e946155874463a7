#include "runner/eagle_proposer.h"

#include <algorithm>

#include "common/check.h"
#include "common/log.h"

namespace kvasir {

EagleProposer::EagleProposer(DraftHead& head, KvCache& cache)
    : head_(head), cache_(cache), block_size_(cache.block_size) {
  // Block 0 is the null block, as in the target's pool; hand out the highest ids first.
  for (int b = cache.num_blocks - 1; b >= 1; --b) free_blocks_.push_back(b);
}

void EagleProposer::release(std::string_view req_id) {
  auto it = requests_.find(std::string(req_id));
  if (it == requests_.end()) return;
  free_blocks_.insert(free_blocks_.end(), it->second.block_ids.begin(), it->second.block_ids.end());
  requests_.erase(it);
}

bool EagleProposer::reserve_blocks(HeadRequest& r, int64_t num_indices) {
  const size_t need = static_cast<size_t>((num_indices + block_size_ - 1) / block_size_);
  if (need <= r.block_ids.size()) return true;
  if (need - r.block_ids.size() > free_blocks_.size()) return false;
  while (r.block_ids.size() < need) {
    r.block_ids.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

void EagleProposer::clear_pass() {
  pass_reqs_.clear(), input_ids_.clear(), positions_.clear(), hidden_rows_.clear(), seq_lens_.clear();
  slot_mapping_.clear(), sample_rows_.clear();
  query_start_loc_.assign(1, 0);
}

void EagleProposer::add_token(HeadRequest& r, int32_t position, TokenId next_token, int32_t hidden_row) {
  const int32_t c = position - r.start;
  input_ids_.push_back(next_token);
  positions_.push_back(position);
  hidden_rows_.push_back(hidden_row);
  slot_mapping_.push_back(int64_t{r.block_ids[static_cast<size_t>(c / block_size_)]} * block_size_ + c % block_size_);
}

void EagleProposer::end_sequence(HeadRequest& r, int32_t position) {
  pass_reqs_.push_back(&r);
  query_start_loc_.push_back(static_cast<int32_t>(input_ids_.size()));
  seq_lens_.push_back(position - r.start + 1);  // the context ends at this sequence's last position
}

Status EagleProposer::run_pass(DraftHead::HiddenFrom from) {
  size_t max_blocks = 1;
  for (const HeadRequest* r : pass_reqs_) max_blocks = std::max(max_blocks, r->block_ids.size());
  block_tables_.assign(pass_reqs_.size() * max_blocks, 0);
  for (size_t i = 0; i < pass_reqs_.size(); ++i) {
    const auto& b = pass_reqs_[i]->block_ids;
    std::copy(b.begin(), b.end(), block_tables_.begin() + static_cast<std::ptrdiff_t>(i * max_blocks));
  }
  ForwardBatch batch;
  batch.num_tokens = static_cast<int>(input_ids_.size());
  batch.input_ids = input_ids_.data();
  batch.positions = positions_.data();
  batch.attn.num_seqs = static_cast<int>(pass_reqs_.size());
  batch.attn.num_tokens = batch.num_tokens;
  batch.attn.query_start_loc = query_start_loc_.data();
  batch.attn.seq_lens = seq_lens_.data();
  batch.attn.block_tables = block_tables_.data();
  batch.attn.max_blocks_per_seq = static_cast<int>(max_blocks);
  batch.attn.slot_mapping = slot_mapping_.data();
  batch.attn.block_size = block_size_;
  ++num_forward_passes_;
  KVASIR_RETURN_IF_ERROR(head_.forward(batch, from, hidden_rows_.data(), cache_));
  if (sample_rows_.empty()) return Status();
  sampled_.resize(sample_rows_.size());
  return head_.greedy_target_tokens(sample_rows_.data(), static_cast<int>(sample_rows_.size()), sampled_.data());
}

void EagleProposer::run_step(std::span<const EagleStepRow> rows) {
  clear_pass();
  drafters_.clear();
  // Pass 1: every request's newly accepted positions, with the target's hidden states.
  for (const EagleStepRow& row : rows) {
    if (row.drafts != nullptr) row.drafts->clear();
    if (row.num_valid <= 0) continue;
    HeadRequest& r = requests_[std::string(row.req_id)];
    const int32_t fed_end = r.start + r.num_fed;
    if (row.first_position >= r.start && row.first_position <= fed_end) {
      r.num_fed = row.first_position - r.start;  // recomputed positions are fed again
    } else {
      if (r.num_fed > 0) ++num_restarts_;
      r.start = row.first_position;
      r.num_fed = 0;
    }
    const int32_t last = row.first_position + row.num_valid - 1;
    if (static_cast<size_t>(last) + 1 >= row.history.size()) {
      KVASIR_LOG_WARN("EAGLE: request %.*s has no token after position %d; proposing nothing for it",
                      static_cast<int>(row.req_id.size()), row.req_id.data(), last);
      release(row.req_id);
      continue;
    }
    const int k = std::max(0, row.max_drafts);
    // Cache indices: the accepted positions, then drafts 1..k-1 (draft k is never fed).
    if (!reserve_blocks(r, int64_t{last - r.start + 1} + std::max(0, k - 1))) {
      ++num_skipped_for_blocks_;
      release(row.req_id);  // starts over at its next step's position
      continue;
    }
    for (int32_t j = 0; j < row.num_valid; ++j) {
      const int32_t p = row.first_position + j;
      add_token(r, p, row.history[static_cast<size_t>(p) + 1], row.first_target_row + j);
    }
    end_sequence(r, last);
    r.num_fed = last - r.start + 1;
    if (k > 0) {
      drafters_.push_back(Drafter{&r, &row, last, static_cast<int32_t>(input_ids_.size()) - 1});
      sample_rows_.push_back(static_cast<int32_t>(input_ids_.size()) - 1);
    }
  }
  if (input_ids_.empty()) return;
  Status s = run_pass(DraftHead::HiddenFrom::kTarget);
  // Drafts 2..k: each drafting request feeds its last draft at the next position, with the head's
  // own output there as the hidden state.
  for (int step = 1; s.ok() && !drafters_.empty(); ++step) {
    for (size_t i = 0; i < drafters_.size(); ++i) drafters_[i].row->drafts->push_back(sampled_[i]);
    std::erase_if(drafters_, [step](const Drafter& d) { return d.row->max_drafts <= step; });
    if (drafters_.empty()) break;
    clear_pass();
    for (Drafter& d : drafters_) {
      const int32_t p = d.position + 1;
      add_token(*d.req, p, d.row->drafts->back(), d.out_row);
      end_sequence(*d.req, p);
      d.position = p;
      d.out_row = static_cast<int32_t>(input_ids_.size()) - 1;
      sample_rows_.push_back(d.out_row);
    }
    s = run_pass(DraftHead::HiddenFrom::kHead);
  }
  if (!s.ok()) {
    // Drafts are only guesses: a failed pass costs speculation, never the output. The head's
    // caches are unknown now, so every request of the step starts over.
    KVASIR_LOG_WARN("EAGLE head forward failed (%s); proposing nothing this step", s.to_string().c_str());
    for (const EagleStepRow& row : rows) {
      if (row.drafts != nullptr) row.drafts->clear();
      release(row.req_id);
    }
  }
}

}  // namespace kvasir
