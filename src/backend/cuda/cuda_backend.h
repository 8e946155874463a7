// The CUDA backend's public face: is there a GPU, and a factory for the Backend (backend.h) that
// runs every op in bf16 with float32 accumulation on one device. The implementation (recorded op
// streams replayed as CUDA graphs, cuBLASLt GEMMs, paged attention) stays in this folder.
// Must not be included by code that wants to build without CUDA: guard with KVASIR_HAVE_CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kvasir {

namespace dist {
class Communicator;
}

struct CudaBackendOptions {
  int device = 0;
  bool enable_graphs = true;  // false: --enforce-eager (every step launches kernels one by one)
  int max_graphs = 64;        // captured step shapes kept; further shapes run eagerly
  // Tensor parallelism: this backend is rank tp_rank of tp_size processes, one GPU each (device is
  // the rank's GPU). init() makes the group's dist::DeviceCommunicator (custom all-reduce, NCCL)
  // over tp_bootstrap, a CPU communicator of the same ranks (not owned; may be null at size 1).
  // device_collectives at tp_size 1 makes it too: the same device path over one rank (tests).
  int tp_rank = 0;
  int tp_size = 1;
  dist::Communicator* tp_bootstrap = nullptr;
  // Whether every rank of the group is on this host: the custom all-reduce (CUDA IPC) only then,
  // else NCCL for every collective.
  bool tp_on_one_host = true;
  bool device_collectives = false;
  // --kv-cache-dtype: bf16 (auto), or FP8 codes (kF8E4M3, kF8E5M2) with the layer's per-tensor
  // scales (kv_cache_codes.cuh): half the bytes per token.
  DType kv_cache_dtype = DType::kBF16;
  // --calculate-kv-scales (Backend::calculates_kv_scales): an FP8 cache's scales from its first
  // write's K and V. That write reads them back to the host before recording (a sync, once per
  // layer), so every later record, graphs included, folds the scales in as constants.
  bool calculate_kv_scales = false;
};

// Usable CUDA devices; 0 when there is no driver or no GPU (never fails).
int cuda_device_count();

StatusOr<std::unique_ptr<Backend>> create_cuda_backend(const CudaBackendOptions& opts);

}  // namespace kvasir
