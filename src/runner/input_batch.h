// InputBatch: the runner side of the scheduler/runner diff protocol, host only. It holds what the
// runner knows of every request (tokens, block table, computed count) and applies one
// SchedulerOutput to it: finished, preempted, new, cached and resumed requests. The real
// ModelRunner and the scheduler tests' fake runner both use it, so both follow one protocol.
// Must not touch tensors, the device or sampling: it only keeps and checks the host state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "sched/scheduler_output.h"

namespace kvasir {

// One request as the runner holds it.
struct CachedRequestState {
  // Prompt then every output token the runner knows (it appends); during a verify step, the
  // drafts being verified follow, until finish_verify replaces them by the emitted tokens.
  std::vector<TokenId> tokens;
  int32_t num_prompt_tokens = 0;
  SamplingParams params;
  std::vector<BlockId> block_ids;
  // Positions with KV written (or being written by the step last applied).
  int32_t num_computed_tokens = 0;
  // Order of first arrival at the runner (0, 1, ...): the unseeded RNG key derives from it, and it
  // survives preemption.
  uint64_t arrival_index = 0;
  // Preempted and not yet resumed: holds tokens and params, but no blocks.
  bool preempted = false;

  int num_output_tokens() const { return static_cast<int>(tokens.size()) - num_prompt_tokens; }
};

// A request that computes tokens in the step just applied, in batch order (new, then cached).
struct ScheduledRequest {
  const std::string* req_id;
  CachedRequestState* state;
  int32_t start = 0;       // first position computed: [start, start + num_tokens)
  int32_t num_tokens = 0;
  bool samples = false;    // reaches the last known token: this step samples the next one
  int32_t num_drafts = 0;  // speculative drafts verified: the last num_drafts of the tokens
};

class InputBatch {
 public:
  explicit InputBatch(int block_size) : block_size_(block_size) {}

  // Applies the diff, then lists the scheduled requests in `scheduled` (cleared first) and
  // advances their computed counts past this step. A SchedulerOutput that breaks the protocol
  // (unknown request, known "new" request, computed counts that disagree, positions past the known
  // tokens, a block table too short) is an internal_error; the state is then unspecified.
  Status apply(const SchedulerOutput& so, std::vector<ScheduledRequest>* scheduled);

  // The step sampled `token` for a request that ScheduledRequest::samples marked.
  static void append_sampled(CachedRequestState& state, TokenId token) { state.tokens.push_back(token); }
  // A verify step of `num_drafts` drafts emitted `emitted` (the accepted drafts, then one token):
  // drops the drafts from the tokens, appends `emitted` and rolls the computed count back past the
  // rejected drafts, as the scheduler does.
  static void finish_verify(CachedRequestState& state, int num_drafts, std::span<const TokenId> emitted);

  const CachedRequestState* find(const std::string& req_id) const;
  CachedRequestState* find(const std::string& req_id);
  size_t size() const { return requests_.size(); }
  int block_size() const { return block_size_; }

 private:
  Status apply_new(const NewRequestData& d);
  Status apply_cached(const CachedRequestData& d);
  Status schedule(const std::string& req_id, int32_t n, const std::vector<TokenId>* drafts,
                  std::vector<ScheduledRequest>* scheduled);

  int block_size_;
  uint64_t next_arrival_index_ = 0;
  std::unordered_map<std::string, CachedRequestState> requests_;
};

}  // namespace kvasir
