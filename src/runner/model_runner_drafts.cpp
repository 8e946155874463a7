// The runner's speculative drafts after a sampled step: a host proposer (ngram, suffix, a draft
// model) for every row that sampled, or the EAGLE / EAGLE-3 head fed each row's accepted tokens.
// Members of ModelRunner (runner/model_runner.h), kept apart from building and running steps.
#include "runner/model_runner.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace kvasir {

int ModelRunner::drafts_to_propose(const std::string& req_id, int room,
                                   const std::unordered_map<std::string, int32_t>& caps) const {
  int k = std::min(config_.speculative.num_speculative_tokens, room);
  // A proposer that runs a model drafts only what the next step's budget could verify; ngram and
  // suffix look up their drafts on the host for next to nothing, so they take k (the budget's
  // probes need drafts to probe with).
  if (eagle_ || config_.speculative.method == "draft_model") {
    if (const auto it = caps.find(req_id); it != caps.end()) k = std::min(k, static_cast<int>(it->second));
  }
  return std::max(0, k);
}

void ModelRunner::propose_eagle_drafts(ModelRunnerOutput& result, const std::unordered_map<std::string, int32_t>& caps) {
  eagle_rows_.clear();
  for (size_t i = 0; i < rows_.size(); ++i) {
    const ScheduledRow& row = rows_[i];
    EagleStepRow e;
    e.req_id = *row.req_id;
    e.history = row.req->tokens;
    e.first_position = row.start;
    e.first_target_row = row.first_token_row;
    e.num_valid = row.num_tokens;
    if (row.logits_row >= 0) {
      // Of a verify step's 1 + d tokens, the last known one and the accepted drafts stand.
      const int emitted = static_cast<int>(result.outputs[i].sampled_token_ids.size());
      e.num_valid = row.num_tokens - row.num_drafts + emitted - 1;
      const int room = config_.max_model_len - static_cast<int>(row.req->tokens.size());
      e.max_drafts = drafts_to_propose(*row.req_id, room, caps);
      e.drafts = &result.outputs[i].spec_token_ids;
      // Drafts withheld by the scheduler: the head skips the step altogether (at large batches
      // its pass would cost ~5% of each step for nothing). When drafting resumes the head
      // restarts its context there, as after a prefix-cache hit: drafts are guesses.
      if (const auto it = caps.find(*row.req_id); it != caps.end() && it->second == 0) e.num_valid = 0;
    }
    eagle_rows_.push_back(e);
  }
  eagle_->run_step(eagle_rows_);
}

void ModelRunner::propose_drafts(ModelRunnerOutput& result, const std::unordered_map<std::string, int32_t>& caps) {
  if (eagle_) return propose_eagle_drafts(result, caps);
  if (!proposer_) return;
  proposal_ctxs_.clear(), proposal_max_.clear(), proposal_out_.clear();
  for (size_t i = 0; i < rows_.size(); ++i) {
    const ScheduledRow& row = rows_[i];
    if (row.logits_row < 0) continue;
    const CachedRequestState& r = *row.req;
    // Never past max_model_len: the scheduler trims further (max_tokens, its draft budget).
    const int room = config_.max_model_len - static_cast<int>(r.tokens.size());
    proposal_ctxs_.push_back(ProposalContext{*row.req_id, r.tokens, r.num_prompt_tokens});
    proposal_max_.push_back(drafts_to_propose(*row.req_id, room, caps));
    proposal_out_.push_back(&result.outputs[i].spec_token_ids);
  }
  // One call for the step: a draft model batches its passes across the requests.
  proposer_->propose_batch(proposal_ctxs_, proposal_max_, proposal_out_);
}

}  // namespace kvasir
