// GEMV for Q4_K / Q5_K / Q6_K weights on the tensor cores, 16 tokens per pass over the weights. The plain
// GGUF GEMV (gguf_gemv.cu) spends about ten instructions per weight on decoding (integer
// conversions at quarter rate, the reference's separate multiply and subtract) and then one FMA
// per token, so an 8B model's decode step would be bound by instruction issue, not by the bytes.
// Here a warp owns 8 output rows and each lane one row's 32-weight units (gguf_kquant_units.cuh:
// one 16-byte fetch of quant bytes for Q4_K/Q5_K); the decoded weights become the B fragments of
// m16n8k16 bf16 MMAs whose A fragments are the tokens' activations (16 rows: up to 16 tokens), so
// a token costs nothing beyond the first but its activation loads: about four instructions per
// weight for any batch up to 16. More tokens take more passes (the backend sends batches up to
// kGgufKquantGemvMaxRows here, larger ones to dequantize + cuBLASLt).
// The 8 warps of a CTA share its 8 rows and split the row's units; their float32 partial sums meet
// in shared memory. Weights are rounded to bf16 before the products (as the GEMM path's scratch
// and the bf16 backend's weights); the backend's KVASIR_GGUF_GEMV=exact keeps these types on the
// float32 GEMV instead (cuda_gguf_ops.cpp).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_kquant_units.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;  // warps per CTA, all on the CTA's 8 rows

constexpr int kTokens = 16;  // the MMA's M: tokens per launch (A rows 8..15 used from 9 tokens)

struct KGemvArgs {
  const bf16* x;
  const uint8_t* w;
  const float* bias;
  void* y;
  int64_t m, k, row_bytes;
  int n, f32_out;
};

// kHigh: more than 8 tokens, A rows 8..15 (fragment registers 1 and 3) carry tokens 8..15.
template <class F, bool kHigh>
__global__ void __launch_bounds__(kWarps * 32) kquant_gemv_kernel(KGemvArgs a) {
  __shared__ float partial[kWarps][kTokens][8];  // [warp][token][row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, tig = lane & 3;  // the mma fragments' groupID / thread-in-group
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 8;
  // B: row row0 + group (rows past m repeat the last; their sums are never written).
  const int64_t wrow = row0 + group < a.m ? row0 + group : a.m - 1;
  const uint8_t* wr = a.w + wrow * a.row_bytes;
  // A: tokens `group` and group + 8; lanes past n load token 0 and zero it (no divergence before
  // the MMAs).
  const uint32_t keep_lo = group < a.n ? 0xffffffffu : 0u, keep_hi = group + 8 < a.n ? 0xffffffffu : 0u;
  const bf16* xlo = a.x + static_cast<int64_t>(keep_lo ? group : 0) * a.k;
  const bf16* xhi = a.x + static_cast<int64_t>(keep_hi ? group + 8 : 0) * a.k;
  pdl_begin();
  const int64_t units = a.k / 32;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // units % 32 == 0 is not given (k = 14336: 448 units), but units % 8 == 0 is: a warp's four
  // lane groups always have whole units, so every lane runs the same number of MMAs.
  for (int64_t u0 = static_cast<int64_t>(warp) * 4; u0 < units; u0 += kWarps * 4) {
    const int64_t u = u0 + tig;
    uint32_t b[16], x[16], xh[16];
    gguf::unit_w<F>(wr, u, b);
    gguf::unit_x<F>(xlo, u, x);
    if constexpr (kHigh) gguf::unit_x<F>(xhi, u, xh);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t frag[4] = {x[2 * j] & keep_lo, kHigh ? xh[2 * j] & keep_hi : 0u, x[2 * j + 1] & keep_lo,
                                kHigh ? xh[2 * j + 1] & keep_hi : 0u};
      mma_bf16(c, frag, b[2 * j], b[2 * j + 1]);
    }
  }
  // c[0], c[1]: token `group`, rows 2 tig and 2 tig + 1 of the tile; c[2], c[3]: token group + 8.
  partial[warp][group][2 * tig] = c[0];
  partial[warp][group][2 * tig + 1] = c[1];
  partial[warp][group + 8][2 * tig] = c[2];
  partial[warp][group + 8][2 * tig + 1] = c[3];
  __syncthreads();
  if (threadIdx.x >= kTokens * 8) return;
  const int t = threadIdx.x >> 3, rr = threadIdx.x & 7;
  const int64_t r = row0 + rr;
  if (t >= a.n || r >= a.m) return;
  float v = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) v += partial[w][t][rr];
  if (a.bias != nullptr) v += a.bias[r];
  if (a.f32_out) static_cast<float*>(a.y)[t * a.m + r] = v;
  else static_cast<bf16*>(a.y)[t * a.m + r] = __float2bfloat16(v);
}

template <class F>
void launch_format(const KGemvArgs& a, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((a.m + 7) / 8);
  if (a.n > 8) launch(kquant_gemv_kernel<F, true>, blocks, kWarps * 32, 0, s, a);
  else launch(kquant_gemv_kernel<F, false>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace

void launch_gguf_kquant_gemv(const void* x, const void* w, DType t, const float* bias, void* y, int n, int64_t m,
                             int64_t k, Elem out, cudaStream_t s) {
  KVASIR_CHECK_MSG(n >= 1 && k % 256 == 0 && aligned16(x) && aligned16(w),
                   "K-quant GEMV: whole super-blocks, 16-byte aligned input and weight");
  if (m <= 0) return;
  const size_t es = out == Elem::kF32 ? 4 : 2;
  // 16 tokens per pass over the weights.
  for (int t0 = 0; t0 < n; t0 += kTokens) {
    KGemvArgs a{};
    a.x = static_cast<const bf16*>(x) + static_cast<int64_t>(t0) * k;
    a.w = static_cast<const uint8_t*>(w);
    a.bias = bias;
    a.y = static_cast<uint8_t*>(y) + static_cast<size_t>(t0) * static_cast<size_t>(m) * es;
    a.m = m;
    a.k = k;
    a.row_bytes = static_cast<int64_t>(*row_bytes(t, k));
    a.n = n - t0 < kTokens ? n - t0 : kTokens;
    a.f32_out = out == Elem::kF32 ? 1 : 0;
    switch (t) {
      case DType::kQ4_K: launch_format<gguf::KUnitQ4_K>(a, s); break;
      case DType::kQ5_K: launch_format<gguf::KUnitQ5_K>(a, s); break;
      case DType::kQ6_K: launch_format<gguf::KUnitQ6_K>(a, s); break;
      default: KVASIR_CHECK_MSG(false, "K-quant GEMV: Q4_K, Q5_K or Q6_K weights");
    }
    KVASIR_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace kvasir::cuda
