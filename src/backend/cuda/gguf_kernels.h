// The CUDA backend's GGUF block-format kernels: weights stay in the blocks the file stores
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; layouts in quant/block_formats.h), rows
// contiguous, uploaded byte for byte. gguf_mma_gemv.cu: the GEMV for decode-sized batches on the
// tensor cores (bf16-rounded weights, 16 tokens per pass over the weight bytes), Q4_K and Q6_K
// through gguf_kquant_gemv.cu (weights as the MMA's A operand, exact products); gguf_gemv.cu: a
// float32 GEMV with the reference's exact weights (1 .. kGgufGemvMaxRows tokens, one pass);
// gguf_dequantize.cu: rows to bf16 (the GEMM path's scratch, embedding lookups) or float32 (tests),
// equal to quant::dequantize_row before rounding.
// Host-callable launchers only; must not know ops, records or models.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace kvasir::cuda {

inline constexpr int kGgufGemvMaxRows = 8;
// Tokens the backend sends to the tensor-core GEMV (16 per pass over the weights) before
// dequantize + cuBLASLt: two passes (about 2x 1 ms on an 8B) against one dequantization of every
// weight per step (~35 GB of traffic). A first estimate: measure with kvasir bench latency at
// batch 16..64 (KVASIR_GGUF_GEMV_ROWS overrides it).
inline constexpr int kGgufMmaGemvMaxRows = 32;
// Q4_K and Q6_K (where gguf_kquant_gemm_supported): the GEMV up to 16 tokens (one pass), the
// K-quant GEMM from there up to kGgufKquantGemmMaxRows (KVASIR_GGUF_KQUANT_GEMM_ROWS; 0 turns it
// off), dequantize + cuBLASLt above (prefills; H100, Q4_K_M 8B: at 128 tokens the GEMM's two
// passes of 64 tie with it, 17.9 against 17.5 ms a step, at 256 lose, 30.4 against 20.5).
inline constexpr int kGgufKquantGemvMaxRows = 16;
inline constexpr int kGgufKquantGemmMaxRows = 64;

// Whether the kernels here read weights of type t (kept in their blocks on the device).
bool gguf_kernel_type(DType t);

// y[t, r] = x[t, :] · w[r, :] (+ bias[r]) for t < n (1..kGgufGemvMaxRows); x [n, k] bf16, 16-byte
// aligned; w [m, k] in blocks of type t, 16-byte aligned; y [n, m] bf16 or float32 (out).
void launch_gguf_gemv(const void* x, const void* w, DType t, const float* bias, void* y, int n, int64_t m, int64_t k,
                      Elem out, cudaStream_t s);

// One projection of x for the tensor-core GEMV: y = x · w^T (+ bias).
struct GgufProjection {
  const void* w;          // [out_features, k] blocks, 16-byte aligned
  const float* bias;      // [out_features] or null
  void* y;                // [n, out_features] bf16 or float32
  int64_t out_features;
};
inline constexpr int kGgufMaxProjections = 3;

// The same on the tensor cores (gguf_mma_gemv.cu), any type above, any n >= 1 (16 tokens per pass
// over the weights), proj[0..num_proj) of one x (q/k/v, gate/up) in one launch per pass: the
// weights rounded to bf16 before the products, float32 sums.
void launch_gguf_mma_gemv(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                          Elem out, cudaStream_t s);

// The tensor-core GEMV's K-quant kernel (gguf_kquant_gemv.cu: weights as the A operand, exact
// weights, float32 sums), which launch_gguf_mma_gemv takes for Q4_K and Q6_K where
// gguf_kquant_gemv_supported(t, k).
// With a gate activation, proj[0] and proj[1] are a gated MLP's gate and up (one token, one
// shape, no biases, bf16 out): up is written, and gate's rows get act(gate) * up, as the unfused
// gated_activation leaves them, in the same launch.
// One token goes through the streamed kernel (gguf_kquant_stream.h) aiming at stream_ctas_per_sm
// CTAs per SM (-1: KVASIR_GGUF_KQUANT_STREAM, default 2; 0: the per-tile kernel), where its plan
// takes the shape; the outputs are the same bit for bit either way.
bool gguf_kquant_gemv_supported(DType t, int64_t k);
void launch_gguf_kquant_gemv(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                             Elem out, cudaStream_t s, GateAct gated = kGateNone, int stream_ctas_per_sm = -1);
// Whether launch_gguf_mma_gemv runs weights of type t and k columns on the K-quant GEMV (the
// kernel's shapes, KVASIR_GGUF_KQUANT_GEMV).
bool gguf_mma_gemv_uses_kquant(DType t, int64_t k);

// The K-quant GEMM (gguf_kquant_gemm.cu) for decode-sized batches past the GEMV's 16 tokens: the
// weights rounded to bf16 in registers (as the dequantize path's), float32 sums, 128-row x
// 64-token (32 up to 32 tokens) tiles, K split over CTAs where the tiles cannot fill the GPU. partial_floats: the
// splits' workspace (0: unsplit); it depends on the projections, n, k and the SM count only, so a
// plan made when the op is recorded holds when it runs.
bool gguf_kquant_gemm_supported(DType t, int64_t k);
struct KquantGemmPlan {
  int splits = 1;
  size_t partial_floats = 0;
};
KquantGemmPlan plan_gguf_kquant_gemm(const GgufProjection* proj, int num_proj, int n, int64_t k, int num_sms);
void launch_gguf_kquant_gemm(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                             Elem out, float* partial, int num_sms, cudaStream_t s);

// out[r - row0, :] = rows row0 .. row0 + rows of w [*, k] dequantized, as bf16 or float32 (out,
// 16-byte aligned).
void launch_gguf_dequantize(const void* w, DType t, int64_t row0, int64_t rows, int64_t k, void* out, Elem elem,
                            cudaStream_t s);

// out[i, :] = bf16(scale * dequantize(table[id_i, :])), table [vocab, d] in blocks of type t; id_i
// as launch_embedding takes it (ids, or fed[sources[i]]).
void launch_gguf_embedding(const void* table, DType t, const int32_t* ids, const int32_t* sources, const int32_t* fed,
                           int n, int64_t d, int64_t vocab, float scale, void* out, cudaStream_t s);

}  // namespace kvasir::cuda
