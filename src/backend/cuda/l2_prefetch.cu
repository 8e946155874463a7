// Weights pulled from DRAM into L2 ahead of the kernel that reads them, by the bulk-copy engine's
// prefetch (cp.async.bulk.prefetch.L2: fire and forget, nothing lands in shared memory or
// registers). At batch 1 a layer's RoPE and decode attention leave DRAM nearly idle for ~10-15 us
// between the q/k/v and o GEMVs; prefetching the o projection there lets its GEMV read L2.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kPrefetchThreads = 128;
constexpr int64_t kPrefetchChunk = 64 << 10;  // bytes per prefetch instruction

__global__ void __launch_bounds__(kPrefetchThreads) l2_prefetch_kernel(L2PrefetchRanges r) {
  pdl_launch_dependents();
  // After the previous kernel: prefetches issued while it still streams its own weights would
  // compete with them for L2 and be evicted before use. This also keeps the chain's order: the
  // next kernel's wait covers this grid, and so every grid before it.
  pdl_wait();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kPrefetchChunk;
  for (int i = 0; i < r.num_ranges; ++i) {
    const char* p = static_cast<const char*>(r.ptr[i]);
    for (int64_t off = tid * kPrefetchChunk; off < r.bytes[i]; off += stride) {
      const uint32_t n = static_cast<uint32_t>(min(kPrefetchChunk, r.bytes[i] - off)) & ~15u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
#endif
    }
  }
}

}  // namespace

void launch_l2_prefetch(const L2PrefetchRanges& r, cudaStream_t s) {
  int64_t total = 0;
  for (int i = 0; i < r.num_ranges; ++i) {
    KVASIR_CHECK(aligned16(r.ptr[i]));
    total += r.bytes[i];
  }
  if (total <= 0) return;
  const int64_t chunks = (total + kPrefetchChunk - 1) / kPrefetchChunk;
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(8, (chunks + kPrefetchThreads - 1) / kPrefetchThreads)));
  launch(l2_prefetch_kernel, blocks, kPrefetchThreads, 0, s, r);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
