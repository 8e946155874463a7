// The CUDA backend's W4A16 linear kernels: 4-bit integer weights (GPTQ, AWQ, compressed-tensors
// pack-quantized) kept in the tile layout of quant/w4a16_layout.h with their group scales (f16,
// bf16 or f32 as stored) and integer zero points, bf16 activations, float32 accumulation.
// The kernels feed tensor cores (mma m16n8k16 / wgmma, bf16): each lane's 16-byte load of codes is
// its B fragments for 4 k16 steps x 2 n8 tiles (equally its A fragments of one m16 tile: rows g,
// g + 8), dequantized in registers to the exact integers code - zero (bf16 holds them exactly).
// The GEMV and the mma.sync GEMM scale each group's float32 partial sums, so no weight is ever
// rounded: the result is x times the checkpoint's own dequantized weights up to float32 summation
// order. The wgmma GEMM multiplies (code - zero) by the scale in bf16 instead (each weight rounded
// once, as vLLM's Marlin kernels do), so its accumulators never wait at group ends.
//  - w4a16_gemv.cu: 1..kW4a16GemvMaxRows tokens. One CTA per 16 output rows, its warps split K and
//    stream the codes (weights the A operand, tokens the 8-wide B operand, x from shared memory
//    or L1); up to three projections of one x in one launch, or gate/up with the gated activation.
//  - w4a16_gemm.cu: more tokens. 64 x 128 output tiles, a cp.async pipeline of activations,
//    codes, scales and zeros; up to three projections of one x in one launch; split over K when
//    the tiles alone cannot fill the GPU, across the CTAs of a cluster that add their tiles through
//    distributed shared memory. w4a16_wgmma.cu: the GEMM on wgmma (9.0 devices, the default;
//    KVASIR_W4A16_GEMM_WGMMA=0 keeps mma.sync): 64 x 256 tiles, weights the A operand from
//    registers, activations B from shared memory, chunks pipelined (w4a16_wgmma_mainloop.cuh); K
//    split across cluster CTAs up to 64 tokens, stream-K over every SM from two row tiles
//    (w4a16_wgmma_stream.cu).
//  - w4a16_support.cu: act-order's column gather, dummy weights, and the dequantization to bf16
//    that long prefills multiply with cuBLASLt (the weight rounded to bf16 once: not exact).
// Host-callable launchers only; must not know ops, records or models.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvasir::cuda {

enum W4a16ScaleType : int32_t { kW4a16ScaleF16 = 0, kW4a16ScaleBf16 = 1, kW4a16ScaleF32 = 2 };

// One projection: y = x · W^T (+ bias), W[n, k] = (code - zero) * scale of group k / group_size.
struct W4a16Projection {
  const void* codes;      // [out / 16, in / 64] tiles of 512 bytes
  const void* scales;     // [num_groups, out] of scale_type
  const uint8_t* zeros;   // [num_groups, out], or null: every zero point is 8
  const float* bias;      // [out] or null
  void* y;                // [rows, out] bf16 (or f32 for an f32 output)
  int64_t out_features;
  int64_t group_size;     // a multiple of 32, or in_features
  int32_t scale_type;     // W4a16ScaleType
  int32_t unused;
};

inline constexpr int kW4a16GemvMaxRows = 16;
// The default crossover: up to 8 tokens (one octet) on the GEMV, more on the wgmma GEMM (H100, GPTQ
// int4 8B shape: batch 12 4.07 vs 4.51 ms a step, batch 16 4.10 vs 5.31; BENCHMARKS.md 2026-12-07).
inline constexpr int kW4a16GemvDefaultRows = 8;
inline constexpr int kW4a16MaxProjections = 3;

// A gated GEMV (GateAct, kernels.h): proj[0].y = act(bf16(gate)) * bf16(up) in place of the gate,
// proj[1].y = up (as gemv.cu's gate/up kernel; two projections, no biases, bf16 out).

// The layout's shape rules (quant/w4a16_layout.h): out % 16 == 0, in % 64 == 0.
bool w4a16_shape_supported(int64_t out_features, int64_t in_features);

// proj[0..num_proj) of x [n, k] bf16 (16-byte aligned), 1 <= n <= kW4a16GemvMaxRows.
void launch_w4a16_gemv(const void* x, const W4a16Projection* proj, int num_proj, int n, int64_t k, Elem out,
                       int gated, cudaStream_t s);

// The wgmma GEMM's stream-K workspace (w4a16_wgmma_stream.cu): kW4a16StreamTickets int32 tickets, zero
// between launches (every launch leaves them zero, so they are zeroed once, when allocated), then
// two float32 partial tiles (64 x 256) for each of up to max_ctas CTAs. The GEMMs of one stream
// share it: a launch touches it only after its PDL wait, when the launch before has finished.
inline constexpr int kW4a16StreamTickets = 8192;
struct W4a16StreamWorkspace {
  void* base;
  int32_t max_ctas;
};
size_t w4a16_stream_workspace_bytes(int max_ctas);

// How many K slices (cluster CTAs, 1..8) the GEMM of [n, k] x [m, k]^T runs in on `num_sms` SMs.
int w4a16_gemm_splits(int64_t n, int64_t m, int64_t k, int num_sms);
// proj[i].y = x · W_i^T (+ bias) for any n, proj[0..num_proj) in one launch (one group size and
// scale type for all).
// ws: the wgmma GEMM's stream-K workspace (above), or null.
void launch_w4a16_gemm(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k, Elem out,
                       int num_sms, const W4a16StreamWorkspace* ws, cudaStream_t s);

// Rows [r0, r0 + rows) of p's weight as bf16 [rows, k] (16-byte aligned): (code - zero) * scale
// in float32, rounded once; r0 and rows multiples of 16. Columns in the layout's order (act-order
// weights: the permuted one, as the kernels read x).
void launch_w4a16_dequantize(const W4a16Projection& p, int64_t r0, int64_t rows, int64_t k, void* out, cudaStream_t s);

// out[r, j] = x[r, perm[j]] (bf16): act-order's input columns in group order.
void launch_w4a16_permute_columns(const void* x, const int32_t* perm, void* out, int64_t rows, int64_t cols,
                                  cudaStream_t s);

// Dummy weights: codes uniform over 0..15 (hashed from seed), every scale `scale` (f16), no zeros.
void launch_fill_random_w4a16(void* codes, void* scales_f16, int64_t code_words, int64_t num_scales, uint64_t seed,
                              float scale, cudaStream_t s);

}  // namespace kvasir::cuda
