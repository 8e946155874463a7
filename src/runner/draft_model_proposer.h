// DraftModelProposer: vLLM's "draft_model" speculative method. A small model with the target's
// vocabulary runs on the target's backend with its own paged KV cache (block ids of its own,
// allocated here from a free list) and proposes k tokens greedily per request per step: one
// forward pass over every asking request's new tokens, then k - 1 one-token passes, each batched
// across requests. Passes are laid out by DraftPassBatch: on a backend that replays graphs, the
// short ones (a step's accepted tokens, one draft each) become padded decode shapes whose greedy
// drafts are sampled on the device, so they replay as captured graphs. Lives next to the
// ModelRunner (it needs a model and a cache); it knows requests only as ids with histories, and
// the model knows nothing of requests.
//
// KV consistency: per request it remembers the tokens whose KV it holds. Each call compares that
// with the request's history (prompt + accepted outputs): the common prefix stays, everything after
// it (rejected drafts, a changed tail) is dropped and recomputed, so the cache rolls back to what
// the target accepted. Prompts are caught up lazily: the first propose feeds the whole prompt, in
// passes of at most max_tokens_per_forward tokens (the target's --max-num-batched-tokens).
// A request that cannot get blocks for this step gets no drafts (verification makes that safe);
// preemption drops a request's blocks (it catches up again on resume), finish frees them.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "model/decoder_model.h"
#include "runner/draft_pass_batch.h"
#include "spec/proposer.h"

namespace kvasir {

class DraftModelProposer final : public Proposer {
 public:
  // `cache`: the draft's own, cache.num_blocks blocks (block 0 is never handed out, as in the
  // target's pool). Both references outlive the proposer.
  DraftModelProposer(DecoderModel& model, KvCache& cache, int max_tokens_per_forward);

  void propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) override;
  void propose_batch(std::span<const ProposalContext> ctxs, std::span<const int> max_num_drafts,
                     std::span<std::vector<TokenId>* const> drafts) override;
  void finish_request(std::string_view req_id) override { release(req_id); }
  void preempt_request(std::string_view req_id) override { release(req_id); }

  int num_free_blocks() const { return static_cast<int>(free_blocks_.size()); }
  int num_tracked_requests() const { return static_cast<int>(requests_.size()); }
  // Forward passes the draft ran and drafts it failed to place (no blocks), for tests and logs.
  int64_t num_forward_passes() const { return num_forward_passes_; }
  // Passes laid out as padded one-query rows (graph-replayable on a device; runner/draft_pass_batch.h).
  int64_t num_one_query_passes() const { return num_one_query_passes_; }
  int64_t num_skipped_for_blocks() const { return num_skipped_for_blocks_; }

 private:
  struct DraftRequest {
    std::vector<TokenId> tokens;  // tokens whose KV the draft cache holds, positions 0..size-1
    std::vector<int32_t> block_ids;
  };
  // One request of this call: what it still has to feed, and its drafts so far.
  struct Work {
    DraftRequest* req;
    std::span<const TokenId> history;
    int k;                     // drafts wanted
    size_t next;               // next history position to feed during catch-up
    std::vector<TokenId>* out;
  };

  void release(std::string_view req_id);
  bool reserve_blocks(DraftRequest& r, size_t num_positions);
  // Runs one pass: for each (work, token count) feeds the tokens at the request's next positions;
  // for rows marked `sample`, appends the greedy next token to `out`.
  Status forward(const std::vector<Work*>& works, const std::vector<std::vector<TokenId>>& feeds,
                 const std::vector<bool>& sample);

  DecoderModel& model_;
  KvCache& cache_;
  int block_size_;
  int max_tokens_per_forward_;
  std::vector<int32_t> free_blocks_;
  std::unordered_map<std::string, DraftRequest> requests_;
  int64_t num_forward_passes_ = 0, num_one_query_passes_ = 0, num_skipped_for_blocks_ = 0;
  // The pass being built and its results, reused.
  DraftPassBatch pass_;
  std::vector<int32_t> sampled_;
  std::vector<DeviceSamplingRow> greedy_rows_;
  std::vector<float> logits_;  // greedy_columns' host copy where the backend does not sample
};

}  // namespace kvasir
