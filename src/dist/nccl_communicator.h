// NcclCommunicator: a Communicator between GPUs over NCCL (built only with -DKVASIR_CUDA=ON). Its
// buffers are device memory of the rank's GPU. Each op is enqueued on the communicator's own
// stream and waited for with a poll that also watches NCCL's asynchronous error and the timeout,
// then aborts the NCCL communicator, so a dead or stalled peer fails the op instead of hanging it.
// NCCL's unique id travels from rank 0 over a CPU bootstrap Communicator (shm or TCP).
// NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set before the communicator is made, and
// nothing here calls cuMulticastCreate.
//
// Sums are NCCL's: deterministic for a fixed topology and NCCL version, but not in rank order, so
// they may differ from the CPU communicators in the last bits. The Communicator ops synchronize
// (not graph-capturable). The enqueue_* calls are for the forward pass (DeviceCommunicator): they
// put the collective on the caller's stream and return once NCCL has accepted it; waiting is the
// stream owner's, so a peer that dies meanwhile is not seen by this class.
#pragma once

#include <memory>

#include "common/status.h"
#include "dist/communicator.h"

namespace kvasir::dist {

struct NcclCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;  // the CUDA device this rank drives
  int64_t timeout_ms = 60'000;
};

struct NcclState;  // NCCL and CUDA handles, kept out of this header

class NcclCommunicator final : public Communicator {
 public:
  // bootstrap: a CPU communicator over the same ranks, used once to send rank 0's NCCL id; may
  // be null when world_size is 1.
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(const NcclCommunicatorOptions& options,
                                                            Communicator* bootstrap);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Status all_reduce_sum(void* data, size_t count, DType dtype) override;
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  Status reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status send(const void* data, size_t bytes, int peer) override;
  Status recv(void* data, size_t bytes, int peer) override;
  Status barrier() override;

  // Stream-ordered, no wait for completion (stream: a cudaStream_t of this rank's device; the
  // calling thread must have this rank's device current).
  Status enqueue_all_reduce_sum(void* data, size_t count, DType dtype, void* stream);
  Status enqueue_all_gather(const void* send, void* recv, size_t bytes_per_rank, void* stream);

 private:
  // Waits until NCCL has accepted an enqueued call (non-blocking mode may answer ncclInProgress).
  Status accept_op(const char* op, int enqueue_result);
  NcclCommunicator() = default;
  // Finishes one enqueued NCCL call (its result code passed as an int, to keep nccl.h out of
  // this header): waits for it, polling for NCCL errors and the timeout; a failure aborts the
  // NCCL communicator and sticks.
  Status run_op(const char* op, int enqueue_result);
  Status begin_op();  // the sticky failure, and selects this rank's device for the calling thread
  int rank_ = 0, world_size_ = 1;
  int64_t timeout_ms_ = 0;
  std::unique_ptr<NcclState> state_;
  Status sticky_;
};

}  // namespace kvasir::dist
