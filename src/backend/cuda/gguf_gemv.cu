// The float32 GEMV over GGUF block weights (KVASIR_GGUF_GEMV=exact; the default decode path is the
// tensor-core GEMV, gguf_mma_gemv.cu): y[t, r] = x[t, :] · w[r, :] (+ bias[r]) for
// 1..kGgufGemvMaxRows tokens with the reference's exact weights. One warp per output row; lane i
// decodes the row's 8-element chunks i, i + 32, ... in registers (gguf_blocks.cuh: the CPU
// reference's values) and multiplies each with every token's 8 activations (16-byte bf16 loads,
// from L1/L2 after the first row), so the weight bytes are read once for all tokens. A warp's 32
// lanes cover consecutive chunks: one K-quant super-block or eight 32-element blocks per step,
// whole cache lines. Four chunks per lane are decoded before their products, so their loads are in
// flight together. Float32 accumulation, warp reduction, bias once at the end. About ten
// instructions per weight for the decoding plus an FMA per token: bound by issue, not by bytes.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_blocks.cuh"
#include "backend/cuda/gguf_kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 4;   // rows per CTA: small CTAs keep the last wave short
constexpr int kUnroll = 4;  // chunks decoded per lane before their products

struct GgufGemvArgs {
  const bf16* x;
  const uint8_t* w;
  const float* bias;
  void* y;
  int64_t m, k, row_bytes;
  int f32_out, unused;
};

template <int N>
__device__ __forceinline__ void fma_chunk(const float (&w)[8], const bf16* __restrict__ x, int64_t k, int64_t col,
                                          float (&acc)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float a[8];
    load8(x + t * k + col, a);
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(w[e], a[e], s);
    acc[t] += s;
  }
}

template <class F, int N>
__global__ void __launch_bounds__(kWarps * 32) gguf_gemv_kernel(GgufGemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  pdl_begin();
  if (r >= a.m) return;
  const uint8_t* wr = a.w + r * a.row_bytes;
  const int64_t chunks = a.k / 8;
  float acc[N];
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  int64_t c = lane;
  for (; c + (kUnroll - 1) * 32 < chunks; c += kUnroll * 32) {
    float w[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) F::chunk(wr, c + u * 32, w[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_chunk<N>(w[u], a.x, a.k, (c + u * 32) * 8, acc);
  }
  for (; c < chunks; c += 32) {
    float w[8];
    F::chunk(wr, c, w);
    fma_chunk<N>(w, a.x, a.k, c * 8, acc);
  }
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = warp_sum(acc[t]);
  if (lane != 0) return;
  const float b = a.bias != nullptr ? a.bias[r] : 0.0f;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    const float v = acc[t] + b;
    if (a.f32_out) static_cast<float*>(a.y)[t * a.m + r] = v;
    else static_cast<bf16*>(a.y)[t * a.m + r] = __float2bfloat16(v);
  }
}

template <class F>
void launch_format(const GgufGemvArgs& a, int n, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((a.m + kWarps - 1) / kWarps);
  switch (n) {
    case 1: launch(gguf_gemv_kernel<F, 1>, blocks, kWarps * 32, 0, s, a); break;
    case 2: launch(gguf_gemv_kernel<F, 2>, blocks, kWarps * 32, 0, s, a); break;
    case 3: launch(gguf_gemv_kernel<F, 3>, blocks, kWarps * 32, 0, s, a); break;
    case 4: launch(gguf_gemv_kernel<F, 4>, blocks, kWarps * 32, 0, s, a); break;
    case 5: launch(gguf_gemv_kernel<F, 5>, blocks, kWarps * 32, 0, s, a); break;
    case 6: launch(gguf_gemv_kernel<F, 6>, blocks, kWarps * 32, 0, s, a); break;
    case 7: launch(gguf_gemv_kernel<F, 7>, blocks, kWarps * 32, 0, s, a); break;
    default: launch(gguf_gemv_kernel<F, 8>, blocks, kWarps * 32, 0, s, a); break;
  }
}

}  // namespace

bool gguf_kernel_type(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void launch_gguf_gemv(const void* x, const void* w, DType t, const float* bias, void* y, int n, int64_t m, int64_t k,
                      Elem out, cudaStream_t s) {
  KVASIR_CHECK_MSG(n >= 1 && n <= kGgufGemvMaxRows && gguf_kernel_type(t) && aligned16(x) && aligned16(w),
                   "GGUF GEMV: 1..8 rows, a GGUF block type, 16-byte aligned input and weight");
  const auto rb = row_bytes(t, k);
  KVASIR_CHECK_MSG(rb.has_value() && k % 8 == 0, "GGUF GEMV: in_features must be whole blocks");
  if (m <= 0) return;
  GgufGemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.w = static_cast<const uint8_t*>(w);
  a.bias = bias;
  a.y = y;
  a.m = m;
  a.k = k;
  a.row_bytes = static_cast<int64_t>(*rb);
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  gguf::with_format(t, [&](auto f) { launch_format<decltype(f)>(a, n, s); });
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
