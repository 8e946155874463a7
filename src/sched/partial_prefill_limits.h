// PartialPrefillLimits: one step's accounting of vLLM's concurrent partial prefills
// (--max-num-partial-prefills N, --max-long-partial-prefills M, --long-prefill-token-threshold):
// the chunk a prefill may take (the step's budget split evenly over the prefills it can hold), and
// whether a prefill may run at all (at most N prompts left unfinished by the step, at most M long
// ones). Plain arithmetic on token counts: knows no requests, blocks or queues.
#pragma once

#include "sched/scheduler_config.h"

namespace kvasir {

class PartialPrefillLimits {
 public:
  // num_schedulable_prefills: prompts that could get a chunk this step (vLLM counts the running
  // prefills, then the waiting prompts the long limit would let in), at least 1.
  PartialPrefillLimits(const SchedulerConfig& config, int num_schedulable_prefills);

  // Off (N = 1): every prefill may run and chunks are the caller's business, as before.
  bool enabled() const { return enabled_; }
  bool is_long(int num_remaining) const { return enabled_ && num_remaining > threshold_; }
  // The largest chunk for a prefill with num_remaining prompt tokens left.
  int chunk_cap(int num_remaining) const;
  // Whether a prefill with num_remaining tokens left may take a chunk of n tokens this step.
  bool allows(int num_remaining, int n) const;
  // Counts a prefill chunk the step took.
  void record(int num_remaining, int n);

  int num_partial() const { return num_partial_; }
  int num_long() const { return num_long_; }

 private:
  bool enabled_;
  int max_partial_;
  int max_long_;
  int threshold_;
  int slot_tokens_;  // max_num_batched_tokens / the prefills this step can hold
  int num_partial_ = 0;
  int num_long_ = 0;
};

}  // namespace kvasir
