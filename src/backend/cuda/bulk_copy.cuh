// The bulk-copy engine (cp.async.bulk, sm_90) and the mbarriers its copies complete on: a kernel
// that streams whole rows into a shared-memory ring arms a stage's barrier with the bytes it
// expects, issues one copy per row from a single thread, and its warps wait on the barrier's phase
// parity. Shared by the decode attention's mma_bulk kernel and the streamed K-quant GEMV.
#pragma once

#include <cstdint>

#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {

__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
// Makes the barriers' initialisation visible to the bulk-copy engine (before the first copy).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  const uint32_t a = smem_addr(b);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  }
}
// bytes (a multiple of 16) from a 16-byte aligned global address to a 16-byte aligned shared one,
// completing on b.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(b))
               : "memory");
}

}  // namespace kvasir::cuda
