// Proposer: guesses the tokens that follow a request's history, for the target model to verify in
// one forward pass (speculative decoding). The runner asks after each step that sampled; guesses
// cost the output nothing but time, since verification keeps only what the target would produce.
// Must not touch tensors or the scheduler: token ids in, token ids out. A proposer that keeps state
// across requests (suffix trees over recent outputs, a draft model's KV cache) is told when a
// request ends or is preempted. The runner asks for a whole step at once (propose_batch), so a
// proposer that runs a model batches across requests; the draft-model proposer lives in runner/
// (it needs a model and a KV cache) and implements this interface.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/ids.h"
#include "spec/speculative_config.h"

namespace kvasir {

// One request's history as the proposer sees it: views, valid for the call only.
struct ProposalContext {
  std::string_view req_id;
  std::span<const TokenId> token_ids;  // prompt then every output token so far
  int num_prompt_tokens = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Writes up to max_num_drafts guesses for the tokens after ctx.token_ids into *drafts (cleared
  // first); none when it has no guess. max_num_drafts >= 0.
  virtual void propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) = 0;
  // One step's requests at once: drafts[i] gets request i's guesses, as propose would write them
  // (the three spans have one size). The default asks propose once per request.
  virtual void propose_batch(std::span<const ProposalContext> ctxs, std::span<const int> max_num_drafts,
                             std::span<std::vector<TokenId>* const> drafts);
  // The request will not be asked about again (finished or aborted).
  virtual void finish_request(std::string_view req_id) {}
  // The request was preempted: state rebuildable from its history may be dropped (it is asked
  // again, with the same history, once it resumes).
  virtual void preempt_request(std::string_view req_id) {}
};

// The proposer for config.method; an unknown or unbuilt method is an invalid_argument (the config
// parser refuses those first, so this only fails on a config built by hand). "draft_model" is an
// invalid_argument too: that proposer needs a loaded model, so the runner builds it.
StatusOr<std::unique_ptr<Proposer>> make_proposer(const SpeculativeConfig& config);

}  // namespace kvasir
