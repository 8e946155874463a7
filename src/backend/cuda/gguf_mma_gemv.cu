// GEMV over GGUF block weights on the tensor cores, 16 tokens per pass over the weights, every
// type the backend keeps in blocks. The float32 GEMV (gguf_gemv.cu) spends about ten instructions
// per weight on decoding (the reference's separate multiply and subtract, integer conversions) and
// then one FMA per token, so an 8B model's decode step would be bound by instruction issue, not by
// the bytes. Here a warp owns 8 output rows and each lane one row's 32-weight units
// (gguf_mma_units.cuh: one 16-byte fetch of quant bytes for Q4_K/Q5_K); the decoded weights become
// the B fragments of m16n8k16 bf16 MMAs whose A fragments are the tokens' activations (16 rows: up
// to 16 tokens), so a token costs nothing beyond the first but its activation loads: about four
// instructions per weight for any batch up to 16. More tokens take more passes (the backend sends
// batches up to kGgufMmaGemvMaxRows here, larger ones to dequantize + cuBLASLt).
// The 8 warps of a CTA share its 8 rows and split the row's units; their float32 partial sums meet
// in shared memory. Up to three projections of one x (q/k/v, gate/up) share a launch: CTAs are the
// projections' 8-row tiles one after another. Weights are rounded to bf16 before the products (as
// the GEMM path's scratch and the bf16 backend's weights); the backend's KVASIR_GGUF_GEMV=exact
// keeps every type on the float32 GEMV instead (cuda_gguf_ops.cpp).

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_mma_units.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;  // warps per CTA, all on the CTA's 8 rows

constexpr int kTokens = 16;  // the MMA's M: tokens per launch (A rows 8..15 used from 9 tokens)

struct MmaGemvArgs {
  const bf16* x;
  GgufProjection proj[kGgufMaxProjections];
  int64_t tile_end[kGgufMaxProjections];  // prefix sums of the projections' 8-row tiles
  int64_t k, row_bytes, y_offset;         // y_offset: this pass's first token (a row of every y)
  int n, f32_out, num_proj, unused;
};

// kHigh: more than 8 tokens, A rows 8..15 (fragment registers 1 and 3) carry tokens 8..15.
// At most 64 registers: 4 CTAs (32 warps) per SM keep enough weight loads in flight.
template <class F, bool kHigh>
__global__ void __launch_bounds__(kWarps * 32, 4) mma_gemv_kernel(MmaGemvArgs a) {
  __shared__ float partial[kWarps][kTokens][8];  // [warp][token][row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, tig = lane & 3;  // the mma fragments' groupID / thread-in-group
  // This CTA's projection and 8-row tile in it.
  const int64_t tile = blockIdx.x;
  int p = 0;
  while (p + 1 < a.num_proj && tile >= a.tile_end[p]) ++p;
  const GgufProjection& pr = a.proj[p];
  const int64_t m = pr.out_features;
  const int64_t row0 = (tile - (p == 0 ? 0 : a.tile_end[p - 1])) * 8;
  // B: row row0 + group (rows past m repeat the last; their sums are never written).
  const int64_t wrow = row0 + group < m ? row0 + group : m - 1;
  const uint8_t* wr = static_cast<const uint8_t*>(pr.w) + wrow * a.row_bytes;
  // A: tokens `group` and group + 8; lanes past n load token 0 and zero it (no divergence before
  // the MMAs).
  const uint32_t keep_lo = group < a.n ? 0xffffffffu : 0u, keep_hi = group + 8 < a.n ? 0xffffffffu : 0u;
  const bf16* xlo = a.x + static_cast<int64_t>(keep_lo ? group : 0) * a.k;
  const bf16* xhi = a.x + static_cast<int64_t>(keep_hi ? group + 8 : 0) * a.k;
  pdl_begin();
  const int64_t units = a.k / 32;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // The loop bound is the warp's (every lane runs the same MMAs); a lane group past the row's last
  // unit (k = 576: 18 units) re-reads the last one and zeroes its activations.
  for (int64_t u0 = static_cast<int64_t>(warp) * 4; u0 < units; u0 += kWarps * 4) {
    const bool valid = u0 + tig < units;
    const int64_t u = valid ? u0 + tig : units - 1;
    const uint32_t lo = valid ? keep_lo : 0u, hi = valid ? keep_hi : 0u;
    uint32_t b[16], x[16], xh[16];
    gguf::unit_w<F>(wr, u, b);
    gguf::unit_x<F>(xlo, u, x);
    if constexpr (kHigh) gguf::unit_x<F>(xhi, u, xh);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t frag[4] = {x[2 * j] & lo, kHigh ? xh[2 * j] & hi : 0u, x[2 * j + 1] & lo,
                                kHigh ? xh[2 * j + 1] & hi : 0u};
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
  if (t >= a.n || r >= m) return;
  float v = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) v += partial[w][t][rr];
  if (pr.bias != nullptr) v += pr.bias[r];
  const int64_t at = a.y_offset * m + t * m + r;
  if (a.f32_out) static_cast<float*>(pr.y)[at] = v;
  else static_cast<bf16*>(pr.y)[at] = __float2bfloat16(v);
}


template <class F>
void launch_format(const MmaGemvArgs& a, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(a.tile_end[a.num_proj - 1]);
  if (a.n > 8) launch(mma_gemv_kernel<F, true>, blocks, kWarps * 32, 0, s, a);
  else launch(mma_gemv_kernel<F, false>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace

// Q4_K and Q6_K on their own kernel (gguf_kquant_gemv.cu) unless KVASIR_GGUF_KQUANT_GEMV=0 (A/B
// runs; =q4k: Q4_K only; cuda_tuning.h).
bool gguf_mma_gemv_uses_kquant(DType t, int64_t k) {
  const int on = kernel_tuning().gguf_kquant_gemv;
  if (on == 0 || (on == 1 && t != DType::kQ4_K)) return false;
  return gguf_kquant_gemv_supported(t, k);
}

void launch_gguf_mma_gemv(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                          Elem out, cudaStream_t s) {
  KVASIR_CHECK_MSG(n >= 1 && gguf_kernel_type(t) && row_bytes(t, k).has_value() && aligned16(x) && num_proj >= 1 &&
                       num_proj <= kGgufMaxProjections,
                   "GGUF MMA GEMV: a GGUF block type, whole blocks, a 16-byte aligned input, 1..3 projections");
  if (gguf_mma_gemv_uses_kquant(t, k)) {
    launch_gguf_kquant_gemv(x, proj, num_proj, t, n, k, out, s);
    return;
  }
  MmaGemvArgs a{};
  a.k = k;
  a.row_bytes = static_cast<int64_t>(*row_bytes(t, k));
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  a.num_proj = num_proj;
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) {
    KVASIR_CHECK_MSG(aligned16(proj[p].w) && proj[p].out_features >= 0, "GGUF MMA GEMV: 16-byte aligned weights");
    a.proj[p] = proj[p];
    tiles += (proj[p].out_features + 7) / 8;
    a.tile_end[p] = tiles;
  }
  if (tiles == 0) return;
  for (int p = 0; p < num_proj; ++p) KVASIR_CHECK_MSG(proj[p].out_features > 0, "GGUF MMA GEMV: empty projection");
  // 16 tokens per pass over the weights.
  for (int t0 = 0; t0 < n; t0 += kTokens) {
    a.x = static_cast<const bf16*>(x) + static_cast<int64_t>(t0) * k;
    a.y_offset = t0;
    a.n = n - t0 < kTokens ? n - t0 : kTokens;
    switch (t) {
      case DType::kQ4_K: launch_format<gguf::UnitQ4_K>(a, s); break;
      case DType::kQ5_K: launch_format<gguf::UnitQ5_K>(a, s); break;
      case DType::kQ6_K: launch_format<gguf::UnitQ6_K>(a, s); break;
      case DType::kQ4_0: launch_format<gguf::UnitQ4_0>(a, s); break;
      case DType::kQ4_1: launch_format<gguf::UnitQ4_1>(a, s); break;
      case DType::kQ5_0: launch_format<gguf::UnitQ5_0>(a, s); break;
      case DType::kQ5_1: launch_format<gguf::UnitQ5_1>(a, s); break;
      case DType::kQ8_0: launch_format<gguf::UnitQ8_0>(a, s); break;
      default: KVASIR_CHECK_MSG(false, "GGUF MMA GEMV: not a GGUF block type");
    }
    KVASIR_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace kvasir::cuda
