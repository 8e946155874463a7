#include "runner/draft_model_proposer.h"

#include <algorithm>

#include "common/check.h"
#include "common/log.h"
#include "model/draft_heads/draft_head.h"

namespace kvasir {

DraftModelProposer::DraftModelProposer(DecoderModel& model, KvCache& cache, int max_tokens_per_forward)
    : model_(model),
      cache_(cache),
      block_size_(cache.block_size),
      max_tokens_per_forward_(max_tokens_per_forward),
      pass_(model.backend().capabilities(), cache.block_size, std::min(max_tokens_per_forward, model.max_num_tokens()),
            model.max_num_logits()) {
  KVASIR_CHECK(max_tokens_per_forward_ >= 1);
  // Block 0 is the null block, as in the target's pool; hand out the highest ids first.
  for (int b = 1; b < cache.num_blocks; ++b) free_blocks_.push_back(b);
  std::reverse(free_blocks_.begin(), free_blocks_.end());
}

void DraftModelProposer::release(std::string_view req_id) {
  auto it = requests_.find(std::string(req_id));
  if (it == requests_.end()) return;
  free_blocks_.insert(free_blocks_.end(), it->second.block_ids.begin(), it->second.block_ids.end());
  requests_.erase(it);
}

bool DraftModelProposer::reserve_blocks(DraftRequest& r, size_t num_positions) {
  const size_t need = (num_positions + static_cast<size_t>(block_size_) - 1) / static_cast<size_t>(block_size_);
  if (need <= r.block_ids.size()) return true;
  if (need - r.block_ids.size() > free_blocks_.size()) return false;
  while (r.block_ids.size() < need) {
    r.block_ids.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

void DraftModelProposer::propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) {
  std::vector<TokenId>* out[] = {drafts};
  propose_batch(std::span<const ProposalContext>(&ctx, 1), std::span<const int>(&max_num_drafts, 1), out);
}

void DraftModelProposer::propose_batch(std::span<const ProposalContext> ctxs, std::span<const int> max_num_drafts,
                                       std::span<std::vector<TokenId>* const> drafts) {
  std::vector<Work> works;
  works.reserve(ctxs.size());
  for (size_t i = 0; i < ctxs.size(); ++i) {
    drafts[i]->clear();
    const ProposalContext& c = ctxs[i];
    const int k = max_num_drafts[i];
    if (k <= 0 || c.token_ids.empty()) continue;
    DraftRequest& r = requests_[std::string(c.req_id)];
    // Roll back to the longest prefix the cache holds that is still the request's history (the
    // accepted tokens); the last history token is always fed, since its logits give draft 1.
    const size_t limit = std::min(r.tokens.size(), c.token_ids.size() - 1);
    size_t p = 0;
    while (p < limit && r.tokens[p] == c.token_ids[p]) ++p;
    r.tokens.resize(p);
    // Positions written: the history, then drafts 1..k-1 (draft k is never fed).
    if (!reserve_blocks(r, c.token_ids.size() + static_cast<size_t>(k) - 1)) {
      ++num_skipped_for_blocks_;
      continue;
    }
    works.push_back(Work{&r, c.token_ids, k, p, drafts[i]});
  }
  if (works.empty()) return;

  std::vector<Work*> pass;
  std::vector<std::vector<TokenId>> feeds;
  std::vector<bool> sample;
  auto run = [&]() {
    const Status s = forward(pass, feeds, sample);
    if (!s.ok()) {
      // Drafts are only guesses: a failed draft pass costs speculation, never the output. The
      // caches of the requests in it are unknown now, so they start over.
      KVASIR_LOG_WARN("draft model forward failed (%s); proposing nothing this step", s.to_string().c_str());
      for (Work* w : pass) w->req->tokens.clear();
      for (Work& w : works) w.out->clear();
      return false;
    }
    return true;
  };
  // Catch-up: every request's unfed history, packed into passes of at most
  // max_tokens_per_forward tokens; a request samples draft 1 in the pass that feeds its last token.
  size_t first_pending = 0;
  while (first_pending < works.size()) {
    pass.clear(), feeds.clear(), sample.clear();
    int budget = max_tokens_per_forward_;
    for (size_t i = first_pending; i < works.size() && budget > 0; ++i) {
      Work& w = works[i];
      const size_t remaining = w.history.size() - w.next;
      const size_t n = std::min(remaining, static_cast<size_t>(budget));
      pass.push_back(&w);
      feeds.emplace_back(w.history.begin() + static_cast<std::ptrdiff_t>(w.next),
                         w.history.begin() + static_cast<std::ptrdiff_t>(w.next + n));
      sample.push_back(n == remaining);
      w.next += n;
      budget -= static_cast<int>(n);
      if (n == remaining) first_pending = i + 1;
    }
    if (!run()) return;
  }
  // Drafts 2..k: one token per request per pass.
  for (int step = 1;; ++step) {
    pass.clear(), feeds.clear(), sample.clear();
    for (Work& w : works) {
      if (w.k > step && static_cast<int>(w.out->size()) == step) {
        pass.push_back(&w);
        feeds.push_back({w.out->back()});
        sample.push_back(true);
      }
    }
    if (pass.empty()) break;
    if (!run()) return;
  }
}

Status DraftModelProposer::forward(const std::vector<Work*>& works, const std::vector<std::vector<TokenId>>& feeds,
                                   const std::vector<bool>& sample) {
  pass_.clear();
  for (size_t i = 0; i < works.size(); ++i) {
    DraftRequest& r = *works[i]->req;
    pass_.begin_sequence(r.block_ids);
    for (const TokenId t : feeds[i]) {
      const int32_t p = static_cast<int32_t>(r.tokens.size());
      pass_.add_token(t, p, p);
      r.tokens.push_back(t);
    }
    pass_.end_sequence();
    if (sample[i]) pass_.sample_last_token();
  }
  const ForwardBatch& batch = pass_.build();
  ++num_forward_passes_;
  if (pass_.one_query_rows()) ++num_one_query_passes_;
  KVASIR_RETURN_IF_ERROR(model_.run_layers(batch, cache_));
  const int n = pass_.num_padded_samples();
  if (n == 0) return Status();
  sampled_.resize(static_cast<size_t>(n));
  const int chunk = model_.max_num_logits();
  for (int b = 0; b < n; b += chunk) {
    const int m = std::min(n - b, chunk);
    // Greedy on the device where the backend samples (only the ids come back, and a padded pass
    // ends in one read-back that replays as one graph), else over a host copy.
    KVASIR_ASSIGN_OR_RETURN(Tensor logits, model_.compute_logits_on_device(pass_.sample_rows() + b, m));
    KVASIR_RETURN_IF_ERROR(greedy_columns(model_.backend(), logits, m, greedy_rows_, logits_, sampled_.data() + b));
  }
  size_t row = 0;
  for (size_t i = 0; i < works.size(); ++i) {
    if (sample[i]) works[i]->out->push_back(sampled_[row++]);
  }
  return Status();
}

}  // namespace kvasir
