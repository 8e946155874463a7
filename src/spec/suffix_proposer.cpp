#include "spec/suffix_proposer.h"

#include <algorithm>

namespace kvasir {

SuffixProposer::SuffixProposer(const SuffixDecodingConfig& config) : trees_(config) {}

SuffixProposer::Tracked* SuffixProposer::track(const ProposalContext& ctx) {
  const std::span<const TokenId> history = ctx.token_ids;
  auto it = tracked_.find(std::string(ctx.req_id));
  if (it != tracked_.end() && history.size() < it->second.num_seen) {
    // The history got shorter than what the tree holds (not something the runner does: accepted
    // tokens are never taken back); start over rather than match against tokens that are gone.
    (void)trees_.stop_request(it->second.idx);
    tracked_.erase(it);
    it = tracked_.end();
  }
  if (it == tracked_.end()) {
    const size_t prompt = std::min(history.size(), static_cast<size_t>(std::max(ctx.num_prompt_tokens, 0)));
    Tracked t{next_idx_++, prompt};
    if (!trees_.start_request(t.idx, history.first(prompt)).ok()) return nullptr;
    it = tracked_.emplace(std::string(ctx.req_id), t).first;
  }
  Tracked& t = it->second;
  if (history.size() > t.num_seen) {
    if (!trees_.add_output(t.idx, history.subspan(t.num_seen)).ok()) return nullptr;
    t.num_seen = history.size();
  }
  return &t;
}

void SuffixProposer::propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) {
  drafts->clear();
  Tracked* t = track(ctx);
  if (t == nullptr || max_num_drafts <= 0) return;
  if (!trees_.propose(t->idx, max_num_drafts, &draft_).ok()) return;
  drafts->assign(draft_.token_ids.begin(), draft_.token_ids.end());
}

void SuffixProposer::finish_request(std::string_view req_id) {
  auto it = tracked_.find(std::string(req_id));
  if (it == tracked_.end()) return;
  (void)trees_.stop_request(it->second.idx);
  tracked_.erase(it);
}

}  // namespace kvasir
