#include "sched/partial_prefill_limits.h"

#include <algorithm>

namespace kvasir {

PartialPrefillLimits::PartialPrefillLimits(const SchedulerConfig& config, int num_schedulable_prefills)
    : enabled_(config.max_num_partial_prefills > 1),
      max_partial_(config.max_num_partial_prefills),
      max_long_(config.max_long_partial_prefills),
      threshold_(config.long_prefill_token_threshold.value_or(config.max_model_len)) {
  const int slots = std::clamp(num_schedulable_prefills, 1, max_partial_);
  slot_tokens_ = std::max(1, config.max_num_batched_tokens / slots);
}

int PartialPrefillLimits::chunk_cap(int num_remaining) const {
  return enabled_ ? std::min(num_remaining, slot_tokens_) : num_remaining;
}

bool PartialPrefillLimits::allows(int num_remaining, int n) const {
  if (!enabled_) return true;
  if (is_long(num_remaining) && num_long_ >= max_long_) return false;
  // A chunk that leaves the prompt unfinished makes one more partial prefill.
  return n >= num_remaining || num_partial_ < max_partial_;
}

void PartialPrefillLimits::record(int num_remaining, int n) {
  if (!enabled_) return;
  if (n < num_remaining) ++num_partial_;
  if (is_long(num_remaining)) ++num_long_;
}

}  // namespace kvasir
