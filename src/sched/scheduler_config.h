// SchedulerConfig: the knobs of the token-budget loop and the KV pool size it schedules into, in
// vLLM's names. validate() returns a Status naming the bad field; the scheduler assumes a valid
// config. Must not hold model or device settings.
#pragma once

#include <optional>

#include "common/status.h"

namespace kvasir {

enum class SchedulingPolicy {
  kFcfs,      // arrival order; preempted requests go back to the front of the queue
  kPriority,  // (priority, arrival): lower priority values first, as in vLLM
};

struct SchedulerConfig {
  int max_num_seqs = 256;             // requests in one step
  int max_num_batched_tokens = 2048;  // tokens in one step
  int max_model_len = 4096;           // prompt + output tokens of one request
  int block_size = 16;                // tokens per KV block
  int num_blocks = 0;                 // KV pool size in blocks, the null block included
  // Caps one prefill chunk so a long prompt shares the step with other prefills; with
  // max_num_partial_prefills > 1 it is also what makes a prompt "long" (more tokens left than this).
  std::optional<int> long_prefill_token_threshold;
  // vLLM's --max-num-partial-prefills / --max-long-partial-prefills: with N > 1 at most N prompts
  // are left partially prefilled by one step, each prefill chunk takes at most
  // max_num_batched_tokens / N, and at most M prefills in a step are long, so short prompts pass
  // long ones and reach their first token sooner (sched/partial_prefill_limits.h). N = 1: off.
  int max_num_partial_prefills = 1;
  int max_long_partial_prefills = 1;
  bool enable_prefix_caching = true;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // vLLM's --async-scheduling: schedule step N+1 while step N runs. A decode scheduled before its
  // input token is known counts it as an output placeholder until the step's result is folded in.
  bool async_scheduling = false;
  // Speculative decoding: the most drafts verified per request per step (0 = off). The runner
  // proposes them; the scheduler verifies as many as the request's acceptance and the batch size
  // make worth it (sched/draft_budget.h).
  int num_speculative_tokens = 0;
  // Verify every draft the runner proposes (up to num_speculative_tokens), whatever the batch
  // size and acceptance: for tests that need drafts in large batches and for measuring verify
  // steps. Set from $KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS by the LLM facade; no flag.
  bool spec_verify_all_drafts = false;
  // What one draft token costs to propose, in units of what one emitted token is worth: a
  // drafting model's weights per pass against the target's per step (setup/draft_cost.h); 0 for
  // host proposers. Weighed when deciding whether a request's drafts are worth proposing at all
  // (SchedulerOutput::num_drafts_to_propose), not when verifying drafts already made.
  double spec_draft_cost_ratio = 0;

  // vLLM's derived default: with max_num_partial_prefills > 1 and no threshold, a prompt is long
  // past 4% of max_model_len. Call once max_model_len is known, before validate().
  void fill_defaults();
  Status validate() const;
};

}  // namespace kvasir
