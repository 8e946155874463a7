// CustomAllReduce: the forward pass's small all-reduces between the GPUs of one host, in one kernel
// (vLLM's custom all-reduce design, written from its description). Every rank cudaMallocs one
// buffer of [signal flags | staging | two-shot results], shares it over CUDA IPC (the handles
// travel over a CPU bootstrap Communicator) and opens its peers', so a kernel on any rank reads
// every rank's staging directly over NVLink/PCIe peer access.
//
// A call copies the input into this rank's staging buffer (a device-to-device copy on the
// caller's stream), then launches one kernel that:
//  - one-shot (small messages): waits until every rank's staging is written (a start barrier on
//    per-block flags), sums element i over the ranks' staging in rank order, writes the result;
//  - two-shot (medium messages): each rank sums only its 1/n of the elements into its results
//    region (reduce-scatter), a barrier, then every rank copies each rank's reduced part
//    (all-gather);
// and ends with a barrier so no rank overwrites its staging while a peer still reads it. Messages
// above max_bytes are not this class's: algorithm_for() says kNone and the caller uses NCCL.
//
// Graph-capturable: the buffers are fixed at creation, the kernel's pointers are plain arguments,
// and each block's flag counter lives in device memory and is advanced by the kernel itself, so a
// replayed graph keeps counting. Every rank must launch the same calls in the same order with the
// same sizes (as for any collective); a peer that never comes makes the kernel trap after
// timeout_ms (the rank's CUDA context is then broken: its next CUDA call fails, never a hang).
// World size 1 runs the same copy and kernel (a sum over one rank). Sums are float32 in rank order
// 0..n-1 (bf16 rounded once at the end), bitwise equal to dist/rank_order_sum.h on every rank.
// Never uses NVLink multicast.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "core/dtype.h"
#include "dist/communicator.h"

namespace kvasir::dist {

struct CustomAllReduceOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;                           // this rank's CUDA device
  size_t max_bytes = size_t{8} << 20;       // the largest message (the staging buffer's size)
  size_t one_shot_max_bytes = size_t{512} << 10;  // above this, two-shot
  // A kernel whose barrier waits longer than this for a peer traps (the CUDA context fails, so
  // the rank's next CUDA call fails) instead of spinning forever; 0 waits forever. Generous: ranks
  // may be seconds apart at start-up.
  int64_t timeout_ms = 300'000;
};

struct CustomAllReduceState;  // device buffers and peer mappings (custom_all_reduce.cpp)

class CustomAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  enum class Algorithm { kNone, kOneShot, kTwoShot };

  // bootstrap: a CPU communicator over the same ranks (null allowed at world size 1). Every rank
  // gets the same outcome: if any rank cannot set up (no peer access, an IPC failure), all fail.
  static StatusOr<std::unique_ptr<CustomAllReduce>> create(const CustomAllReduceOptions& options,
                                                           Communicator* bootstrap);
  ~CustomAllReduce();
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  size_t max_bytes() const { return max_bytes_; }

  // How a message of `bytes` goes: the same answer on every rank for the same size.
  Algorithm algorithm_for(size_t bytes) const;

  // Enqueues on `stream`: data[i] = rank-order sum over the ranks' data[i] (kF32 or kBF16).
  // InvalidArgument when algorithm_for() is kNone. Nothing is waited for.
  Status all_reduce_sum(void* data, size_t count, DType dtype, cudaStream_t stream);
  // Enqueues: recv = every rank's `send` in rank order (bytes_per_rank <= max_bytes).
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank, cudaStream_t stream);

 private:
  CustomAllReduce() = default;
  int rank_ = 0, world_size_ = 1, device_ = 0;
  size_t max_bytes_ = 0, one_shot_max_bytes_ = 0;
  std::unique_ptr<CustomAllReduceState> state_;
};

}  // namespace kvasir::dist
