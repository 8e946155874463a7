#include "runner/eagle_proposer.h"

#include <algorithm>

#include "common/check.h"
#include "common/log.h"

namespace kvasir {

EagleProposer::EagleProposer(DraftHead& head, KvCache& cache)
    : head_(head),
      cache_(cache),
      block_size_(cache.block_size),
      pass_(head.backend_capabilities(), cache.block_size, head.max_num_tokens(), head.max_num_rows()) {
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

Status EagleProposer::run_pass(DraftHead::HiddenFrom from) {
  const ForwardBatch& batch = pass_.build();
  ++num_forward_passes_;
  if (pass_.one_query_rows()) ++num_one_query_passes_;
  KVASIR_RETURN_IF_ERROR(head_.forward(batch, from, pass_.tags(), cache_));
  if (pass_.num_samples() == 0) return Status();
  sampled_.resize(static_cast<size_t>(pass_.num_padded_samples()));
  return head_.greedy_target_tokens(pass_.sample_rows(), pass_.num_padded_samples(), sampled_.data());
}

void EagleProposer::run_step(std::span<const EagleStepRow> rows) {
  pass_.clear();
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
    // Each position p is fed with the token after it (its cache index counts from r.start).
    pass_.begin_sequence(r.block_ids);
    for (int32_t j = 0; j < row.num_valid; ++j) {
      const int32_t p = row.first_position + j;
      pass_.add_token(row.history[static_cast<size_t>(p) + 1], p, p - r.start, row.first_target_row + j);
    }
    pass_.end_sequence();
    r.num_fed = last - r.start + 1;
    if (k > 0) {
      drafters_.push_back(Drafter{&r, &row, last, pass_.num_tokens() - 1});
      pass_.sample_last_token();
    }
  }
  if (pass_.num_tokens() == 0) return;
  Status s = run_pass(DraftHead::HiddenFrom::kTarget);
  // Drafts 2..k: each drafting request feeds its last draft at the next position, with the head's
  // own output there as the hidden state.
  for (int step = 1; s.ok() && !drafters_.empty(); ++step) {
    for (size_t i = 0; i < drafters_.size(); ++i) drafters_[i].row->drafts->push_back(sampled_[i]);
    std::erase_if(drafters_, [step](const Drafter& d) { return d.row->max_drafts <= step; });
    if (drafters_.empty()) break;
    pass_.clear();
    for (Drafter& d : drafters_) {
      const int32_t p = d.position + 1;
      pass_.begin_sequence(d.req->block_ids);
      pass_.add_token(d.row->drafts->back(), p, p - d.req->start, d.out_row);
      pass_.end_sequence();
      pass_.sample_last_token();
      d.position = p;
      d.out_row = pass_.num_tokens() - 1;
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
