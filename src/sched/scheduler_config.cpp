#include "sched/scheduler_config.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace kvasir {

void SchedulerConfig::fill_defaults() {
  if (max_num_partial_prefills > 1 && !long_prefill_token_threshold) {
    long_prefill_token_threshold = std::max(1, static_cast<int>(static_cast<int64_t>(max_model_len) * 4 / 100));
  }
}

Status SchedulerConfig::validate() const {
  auto positive = [](const char* name, int v) -> Status {
    if (v > 0) return Status::ok_status();
    return invalid_argument(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  KVASIR_RETURN_IF_ERROR(positive("max_num_seqs", max_num_seqs));
  KVASIR_RETURN_IF_ERROR(positive("max_num_batched_tokens", max_num_batched_tokens));
  KVASIR_RETURN_IF_ERROR(positive("max_model_len", max_model_len));
  KVASIR_RETURN_IF_ERROR(positive("block_size", block_size));
  if (num_blocks < 2) {
    return invalid_argument("num_blocks must be at least 2 (the null block and one more), got " +
                            std::to_string(num_blocks));
  }
  // Every running request must be able to decode its token in every step.
  if (max_num_batched_tokens < max_num_seqs) {
    return invalid_argument("max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
                            ") must be >= max_num_seqs (" + std::to_string(max_num_seqs) + ")");
  }
  if (num_speculative_tokens < 0 || num_speculative_tokens > 64) {
    return invalid_argument("num_speculative_tokens must be in [0, 64], got " + std::to_string(num_speculative_tokens));
  }
  // The fold of step N must roll rejected drafts back before step N+1 is scheduled.
  if (num_speculative_tokens > 0 && async_scheduling) {
    return invalid_argument("speculative decoding (--speculative-config) with --async-scheduling is not supported yet");
  }
  if (long_prefill_token_threshold && *long_prefill_token_threshold <= 0) {
    return invalid_argument("long_prefill_token_threshold must be positive when set");
  }
  // vLLM's rules (SchedulerConfig), in its words.
  if (max_num_partial_prefills < 1) {
    return invalid_argument("max_num_partial_prefills (" + std::to_string(max_num_partial_prefills) +
                            ") must be greater than or equal to 1");
  }
  if (max_long_partial_prefills < 1 || max_long_partial_prefills > max_num_partial_prefills) {
    return invalid_argument("max_long_partial_prefills (" + std::to_string(max_long_partial_prefills) +
                            ") must be greater than or equal to 1 and less than or equal to "
                            "max_num_partial_prefills (" + std::to_string(max_num_partial_prefills) + ")");
  }
  if (max_num_partial_prefills > 1) {
    if (!long_prefill_token_threshold) {
      return invalid_argument("max_num_partial_prefills > 1 needs long_prefill_token_threshold (fill_defaults() sets it)");
    }
    if (*long_prefill_token_threshold > max_model_len) {
      return invalid_argument("long_prefill_token_threshold (" + std::to_string(*long_prefill_token_threshold) +
                              ") cannot be greater than the max_model_len (" + std::to_string(max_model_len) + ")");
    }
  }
  return Status::ok_status();
}

}  // namespace kvasir
