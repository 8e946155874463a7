// The CUDA backend's FP8 (e4m3) linear kernels: weights stored as e4m3 codes with one float32
// scale per output row (a per-tensor scale repeated), so a decode step reads half the bytes of
// bf16. fp8_gemv.cu: batch 1..kFp8GemvMaxRows, bf16 activations times FP8 weights with float32
// accumulation, the row scale applied at the end. fp8_quantize.cu: weight conversion at load, the
// activation quantizer in front of the FP8 GEMM (fp8_gemm.h) and the GEMM's scaling epilogue.
// Host-callable launchers only; must not know ops, records or models.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvasir::cuda {

// One projection of an FP8 linear: y = (x · codes^T) * w_scales (+ bias).
struct Fp8Projection {
  const void* w;          // [out_features, in_features] e4m3 codes
  const float* w_scales;  // [out_features]
  const float* bias;      // [out_features] or null
  void* y;                // [rows, out_features] bf16 (or f32 for an f32 output)
  int64_t out_features;
};

inline constexpr int kFp8GemvMaxRows = 8;
inline constexpr int kFp8MaxProjections = 3;

// The GEMV needs 16-byte rows of codes (in_features % 16) and at most kFp8GemvMaxRows tokens.
bool fp8_gemv_supported(int64_t n, int64_t k);

// A gated GEMV (GateAct, kernels.h): proj[0].y = act(bf16(gate)) * bf16(up) in place of the gate,
// proj[1].y = up (as gemv.cu's gate/up kernel; two projections, no biases, bf16 out).

// proj[0..num_proj) of x [n, k] bf16 (16-byte aligned); out elem applies to every projection.
void launch_fp8_gemv(const void* x, const Fp8Projection* proj, int num_proj, int n, int64_t k, Elem out, int gated,
                     cudaStream_t s);

// dst[r, c] = e4m3(src[r, c] / row_scales[r]) (0 where the scale is 0): a float32 matrix that is
// codes x scales gives its codes back exactly.
void launch_f32_to_fp8_rows(const float* src, const float* row_scales, void* dst, int64_t rows, int64_t cols,
                            cudaStream_t s);

// Dummy weights: codes uniform over [-448, 448] (rounded to e4m3), every row scale `scale`.
void launch_fill_random_fp8(void* codes, float* row_scales, int64_t rows, int64_t cols, uint64_t seed, float scale,
                            cudaStream_t s);

// Activations to e4m3 for the FP8 GEMM: q[r, :] = e4m3(x[r, :] / scale[r]) saturating at 448,
// scale[r] = static_scale, or max|x[r, :]| / 448 when static_scale is 0 (dynamic per token) —
// the same float32 division as quant/fp8_activations.h.
void launch_quantize_fp8_rows(const void* x, int64_t rows, int64_t cols, float static_scale, void* q, float* q_scales,
                              cudaStream_t s);

// The FP8 GEMM's epilogue: y[r, c] = bf16(y[r, c] * x_scales[r] * w_scales[c] (+ bias[c])), in place.
void launch_fp8_scale_rows_cols(void* y, const float* x_scales, const float* w_scales, const float* bias, int64_t rows,
                                int64_t cols, cudaStream_t s);

}  // namespace kvasir::cuda
