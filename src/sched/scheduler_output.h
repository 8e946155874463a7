// The plain data that crosses the engine step: SchedulerOutput (scheduler -> runner, diff-encoded
// as in vLLM v1), ModelRunnerOutput (runner -> scheduler) and EngineCoreOutputs (scheduler ->
// output processor). Header-only value types, no behaviour, no pointers: the runner and the engine
// include this without linking the scheduler, and a multi-process executor can serialize them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/request.h"
#include "core/sampling_params.h"

namespace kvasir {

// ---- scheduler -> runner -------------------------------------------------------------------

// A request the runner has not seen: everything it needs, once.
struct NewRequestData {
  std::string req_id;
  std::vector<TokenId> prompt_token_ids;
  SamplingParams sampling_params;
  // The sampler masks it (and stop_token_ids) below min_tokens.
  std::optional<TokenId> eos_token_id;
  std::optional<int64_t> adapter_id;
  std::vector<BlockId> block_ids;   // the whole block table
  int32_t num_computed_tokens = 0;  // prefix-cache hit: the first position to compute
};

// A request the runner already holds: only what changed.
struct CachedRequestData {
  std::string req_id;
  // Back after a preemption: the runner dropped it, so new_block_ids is the WHOLE table (replace,
  // do not append) and resumed_token_ids carries every token (prompt then output) to recompute.
  bool resumed_from_preemption = false;
  std::vector<TokenId> resumed_token_ids;
  std::vector<BlockId> new_block_ids;  // appended to the block table (unless resumed)
  int32_t num_computed_tokens = 0;     // tokens with KV before this step: positions start here
};

struct SchedulerOutput {
  std::vector<NewRequestData> scheduled_new_reqs;
  std::vector<CachedRequestData> scheduled_cached_reqs;
  // Tokens to compute this step per scheduled request: positions [num_computed_tokens,
  // num_computed_tokens + n). Sampling happens only where that reaches the request's last token.
  std::unordered_map<std::string, int32_t> num_scheduled_tokens;
  int32_t total_num_scheduled_tokens = 0;
  // Finished (any reason, aborts included) since the previous step: drop their state. Ids the
  // runner never saw may appear; ignore those.
  std::vector<std::string> finished_req_ids;
  // Preempted this step: their blocks are gone; drop them from the batch until resumed.
  std::vector<std::string> preempted_req_ids;
  // Requests with a grammar that sample this step (vLLM's structured_output_request_ids): the
  // engine fills a GrammarBitmask row for each while the step's forward pass runs.
  std::vector<std::string> structured_output_req_ids;
  // Speculative decoding (vLLM's scheduled_spec_decode_tokens): per request, the drafts this step
  // verifies. They are the last entries of its num_scheduled_tokens (positions after its last
  // known token); the runner samples at each and returns the accepted run plus one token.
  std::unordered_map<std::string, std::vector<TokenId>> scheduled_spec_decode_tokens;
  // Speculative decoding: requests that sample this step and whose drafts the next step's budget
  // would drop at this batch size and acceptance estimate, with how many drafts to propose (0).
  // A proposer that runs a model (draft_model, eagle / eagle3) drafts no more than that; a
  // host-only one (ngram, suffix) may ignore it. Absent: num_speculative_tokens.
  std::unordered_map<std::string, int32_t> num_drafts_to_propose;
};


// ---- runner -> scheduler -------------------------------------------------------------------

// Top-k logprobs, one row per token: [num_rows, num_per_row] flattened row-major. Opaque to the
// scheduler except for the row count (it drops rows of tokens cut off by a stop condition).
struct LogprobsLists {
  int32_t num_rows = 0;
  int32_t num_per_row = 0;
  std::vector<TokenId> token_ids;  // [num_rows * num_per_row]
  std::vector<float> logprobs;     // [num_rows * num_per_row]
  std::vector<int32_t> ranks;      // [num_rows] rank of the sampled (or prompt) token
};

struct RunnerRequestOutput {
  std::string req_id;
  // Sampled this step, in order (more than one only with speculative decoding). Empty for a
  // prefill chunk that does not reach the prompt's end.
  std::vector<TokenId> sampled_token_ids;
  std::optional<LogprobsLists> logprobs;         // one row per sampled token
  std::optional<LogprobsLists> prompt_logprobs;  // rows for this step's prompt chunk
  // Speculative decoding: drafts for the tokens after sampled_token_ids, proposed after sampling
  // (vLLM's spec_token_ids); verified by a later step if the scheduler chooses to.
  std::vector<TokenId> spec_token_ids;
};

struct ModelRunnerOutput {
  std::vector<RunnerRequestOutput> outputs;  // one per scheduled request, any order
};

// ---- scheduler -> output processor ---------------------------------------------------------

struct EngineCoreOutput {
  std::string req_id;
  std::vector<TokenId> new_token_ids;
  std::optional<LogprobsLists> new_logprobs;
  std::optional<LogprobsLists> new_prompt_logprobs;
  std::optional<FinishReason> finish_reason;  // set on the request's last output
  std::optional<TokenId> stop_token_id;       // the stop_token_ids entry that ended it (not EOS)
  std::string error_message;                  // why, when finish_reason is kError
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache on first admission

  bool finished() const { return finish_reason.has_value(); }
};

struct SchedulerStats {
  int32_t num_running_reqs = 0;
  int32_t num_waiting_reqs = 0;
  int64_t num_preemptions = 0;       // since start
  double kv_cache_usage = 0.0;       // [0, 1]
  int64_t prefix_cache_queries = 0;  // tokens looked up, since start
  int64_t prefix_cache_hits = 0;     // tokens found, since start
  // Speculative decoding, since start (vLLM's SpecDecodingStats): verify steps of a request with
  // drafts, draft tokens verified, drafts accepted, and accepted per draft position.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos;
};

struct EngineCoreOutputs {
  std::vector<EngineCoreOutput> outputs;
  SchedulerStats stats;
};

}  // namespace kvasir
