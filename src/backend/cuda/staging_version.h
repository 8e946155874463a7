// Version numbers for host arrays the CUDA backend refills in place within a step (the plan
// caches' plans, the prefill work lists). StepQueue::stage reuses an array's earlier copy in the
// step only for the same (pointer, size, version), so a refilled array is copied again even where
// its size spares it the comparison. Process-wide, so two arrays that take turns at one address
// never share a number. Plain C++: the plan code that uses it is tested on the CPU.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvasir::cuda {

inline uint64_t next_staging_version() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kvasir::cuda
