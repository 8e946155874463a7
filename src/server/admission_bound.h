// AdmissionBound: --max-num-queued-reqs, counted in sequences (a request's prompts x n), not in
// requests. A request's sequences are admitted all at once or not at all, in one atomic step, so
// concurrent requests cannot together pass the bound, and one request cannot exceed it alone.
// Must not know about HTTP, requests or the engine: callers pass counts.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/status.h"

namespace kvasir::server {

class AdmissionBound {
 public:
  explicit AdmissionBound(int64_t max_num_waiting);

  // OK: the sequences count as waiting until released. ResourceExhausted: they do not fit beside
  // those already waiting (a retry may succeed). InvalidArgument: more than the whole bound (no
  // retry can succeed).
  Status try_admit(int64_t num_sequences);
  void release(int64_t num_sequences);

  int64_t num_waiting() const { return num_waiting_.load(); }
  int64_t max_num_waiting() const { return max_num_waiting_; }

 private:
  const int64_t max_num_waiting_;
  std::atomic<int64_t> num_waiting_{0};
};

}  // namespace kvasir::server
