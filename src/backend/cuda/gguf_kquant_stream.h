// One token's K-quant GEMV with its weights streamed through a shared-memory ring
// (gguf_kquant_stream.cu): the sums of the per-tile kernel (gguf_kquant_gemv.cu), in its order,
// bit for bit, but persistent CTAs keep a few stages of weight rows in flight from the bulk-copy
// engine while their warps sum the stage before, so the memory system never waits on the MMAs.
// Host-callable launchers only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/gguf_kernels.h"

namespace kvasir::cuda {

// What one launch runs: ctas persistent CTAs (0: the ring cannot take this shape), stages ring
// slots each, smem dynamic shared bytes, cta_smem all the shared memory a CTA holds on its SM
// (smem, the kernel's static arrays and the runtime's 1 KB reserve), x staged in shared memory or
// read from L1, and the per-SM residency the kernel is built for (its register cap).
struct KquantStreamPlan {
  int ctas = 0;
  int stages = 0;
  size_t smem = 0;
  size_t cta_smem = 0;
  bool stage_x = false;
  int ctas_per_sm = 0;
};

// ctas_per_sm: 1..3, or this: 2 or 3, whichever gives the launch fewer rounds of tiles (ties: 2).
inline constexpr int kKquantStreamAuto = 4;

// The plan for weights of type t (Q4_K any k; Q6_K rows of a multiple of 8 super-blocks, so each
// stage's row bytes are whole 16-byte units), `tiles` 16-row tiles (gated: gate's), aiming at
// ctas_per_sm CTAs per SM and taking fewer where a CTA's ring of at least two stages does not fit.
KquantStreamPlan plan_gguf_kquant_stream(DType t, int64_t k, int64_t tiles, bool gated, int ctas_per_sm, int num_sms,
                                         size_t smem_per_sm, size_t smem_per_block);

// launch_gguf_kquant_gemv for one token through the ring (same arguments, n = 1), aiming at
// ctas_per_sm (1..3 or kKquantStreamAuto). Returns false, launching nothing, where the plan cannot run it.
bool launch_gguf_kquant_stream(const void* x, const GgufProjection* proj, int num_proj, DType t, int64_t k, Elem out,
                               cudaStream_t s, GateAct gated, int ctas_per_sm);

}  // namespace kvasir::cuda
