// EagleProposer: vLLM's "eagle" and "eagle3" speculative methods. After each target step it runs
// the step's tokens through the head (model/draft_heads/draft_head.h: an EAGLE-1/2 head, model/draft_heads/eagle_head.h,
// or an EAGLE-3 head, model/draft_heads/eagle3_head.h) with the target's hidden states of those tokens,
// then drafts k tokens greedily per sampling request: draft 1 from the last accepted position,
// drafts 2..k from one-token passes that feed the head its own previous output. Every
// pass is batched across the step's requests and laid out by DraftPassBatch: on a backend that
// replays graphs, as padded decode shapes that replay as captured graphs. Lives next to the ModelRunner (it needs the head and
// a KV cache); it knows requests only as ids with histories, and the head knows nothing of them.
//
// The head's paged KV cache has block ids of its own (a free list here; block 0 never handed out).
// Per request it holds positions [start, start + num_fed): each fed with the target's hidden
// state and the token after it, so only accepted tokens are ever fed and the positions the drafts
// wrote are simply overwritten next step (the rollback). A step whose first position is not
// start + num_fed (a prefix-cache hit, a resume after preemption, a step skipped for want of
// blocks) restarts the request's head context at that position: the target computed no hidden
// states before it, so the head attends to what it has (drafts are guesses; verification keeps
// the output exact). Preemption and finishing free a request's blocks.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/draft_heads/draft_head.h"
#include "runner/draft_pass_batch.h"
#include "spec/proposer.h"

namespace kvasir {

// One request of the target's step, after its samples were folded into `history`.
struct EagleStepRow {
  std::string_view req_id;
  std::span<const TokenId> history;  // prompt then accepted outputs
  int32_t first_position = 0;        // the step's first token's position
  int32_t num_valid = 0;             // leading step tokens that stand (a verify step's accepted ones)
  int32_t first_target_row = 0;      // that token's row in the target's forward
  int max_drafts = 0;                // 0: no drafts wanted (the step did not sample this request)
  std::vector<TokenId>* drafts = nullptr;  // cleared, then filled when max_drafts > 0
};

class EagleProposer {
 public:
  // `cache`: the head's own; both outlive the proposer.
  EagleProposer(DraftHead& head, KvCache& cache);

  void run_step(std::span<const EagleStepRow> rows);
  void finish_request(std::string_view req_id) { release(req_id); }
  void preempt_request(std::string_view req_id) { release(req_id); }

  int num_free_blocks() const { return static_cast<int>(free_blocks_.size()); }
  int num_tracked_requests() const { return static_cast<int>(requests_.size()); }
  int64_t num_forward_passes() const { return num_forward_passes_; }
  // Passes laid out as padded one-query rows (graph-replayable on a device; runner/draft_pass_batch.h).
  int64_t num_one_query_passes() const { return num_one_query_passes_; }
  int64_t num_restarts() const { return num_restarts_; }
  int64_t num_skipped_for_blocks() const { return num_skipped_for_blocks_; }

 private:
  struct HeadRequest {
    int32_t start = 0;    // position of cache index 0
    int32_t num_fed = 0;  // cache indices holding accepted positions
    std::vector<int32_t> block_ids;
  };
  // A drafting request of this step: its state, position of its last draft input, its row in the
  // last pass's output.
  struct Drafter {
    HeadRequest* req;
    const EagleStepRow* row;
    int32_t position;
    int32_t out_row;
  };

  void release(std::string_view req_id);
  bool reserve_blocks(HeadRequest& r, int64_t num_indices);
  // Runs pass_ (its tags are the tokens' hidden rows) and greedy-samples its sample rows into sampled_.
  Status run_pass(DraftHead::HiddenFrom from);

  DraftHead& head_;
  KvCache& cache_;
  int block_size_;
  std::vector<int32_t> free_blocks_;
  std::unordered_map<std::string, HeadRequest> requests_;
  int64_t num_forward_passes_ = 0, num_one_query_passes_ = 0, num_restarts_ = 0, num_skipped_for_blocks_ = 0;
  DraftPassBatch pass_;            // the pass being built, reused
  std::vector<int32_t> sampled_;   // its greedy drafts (padded count)
  std::vector<Drafter> drafters_;
};

}  // namespace kvasir
