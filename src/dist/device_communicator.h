// DeviceCommunicator: the collectives of the CUDA forward pass (tensor parallelism), enqueued on
// the caller's stream (the backend's), as vLLM's CudaCommunicator: an all-reduce small enough for
// the custom all-reduce's buffer goes there (one kernel, graph-capturable), a larger one to NCCL;
// all-gathers likewise. Built only with -DKVASIR_CUDA=ON (kvasir_dist_cuda).
//
// The choice depends only on the message size, so every rank takes the same path for the same
// call. NCCL calls are not captured into CUDA graphs here (capturable() says which calls are), so
// a step that needs one runs eagerly. World size 1 goes through the same paths (the custom kernel
// over one rank, NCCL with one rank), so a single GPU exercises them.
// KVASIR_DISABLE_CUSTOM_ALL_REDUCE=1 (vLLM's disable_custom_all_reduce) sends everything to NCCL.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "common/status.h"
#include "dist/communicator.h"
#include "dist/custom_all_reduce.h"
#include "dist/nccl_communicator.h"

namespace kvasir::dist {

struct DeviceCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;
  int64_t timeout_ms = 60'000;          // NCCL set-up and acceptance of a call
  // false: NCCL only. The custom all-reduce maps peers' buffers over CUDA IPC, so a group with
  // ranks on several hosts must pass false (every rank alike: the choice is the group's).
  bool custom_all_reduce = true;
  size_t custom_max_bytes = size_t{8} << 20;
};

class DeviceCommunicator {
 public:
  // bootstrap: a CPU communicator over the same ranks (null allowed at world size 1). Every rank
  // must call create at the same point; the custom all-reduce's set-up outcome is agreed among
  // the ranks, and when it cannot be made (no peer access) every rank uses NCCL alone.
  static StatusOr<std::unique_ptr<DeviceCommunicator>> create(const DeviceCommunicatorOptions& options,
                                                              Communicator* bootstrap);

  int rank() const { return nccl_->rank(); }
  int world_size() const { return nccl_->world_size(); }
  int device() const { return device_; }
  bool has_custom_all_reduce() const { return custom_ != nullptr; }

  // Whether these calls go to the custom kernels (and so may be captured into a CUDA graph).
  bool capturable_all_reduce(size_t bytes) const;
  bool capturable_all_gather(size_t bytes_per_rank) const;

  // Enqueued on `stream` (of this rank's device, current on the calling thread); not waited for.
  Status all_reduce_sum(void* data, size_t count, DType dtype, cudaStream_t stream);  // in place
  Status all_gather(const void* send,  // [bytes_per_rank]
                    void* recv,        // [world_size * bytes_per_rank]
                    size_t bytes_per_rank, cudaStream_t stream);

 private:
  DeviceCommunicator() = default;
  int device_ = 0;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<CustomAllReduce> custom_;  // null when disabled or unavailable
};

}  // namespace kvasir::dist
