// FP8 GEMV for decode-sized batches: y[t, r] = (x[t, :] · codes[r, :]) * scale[r] (+ bias[r]) for
// up to kFp8GemvMaxRows tokens and up to three projections of one x (q/k/v) in one launch. As the
// bf16 GEMV (gemv.cu) it lives on weight bandwidth: one warp per output row, 16-byte non-caching
// loads (16 codes each, 512 columns per warp step), four in flight per lane, the first round issued
// before the kernel waits for the previous one (weights are never written by an earlier kernel).
// Codes become floats through the hardware e4m3x2 -> f16x2 conversion; x (bf16) comes from L1/L2;
// accumulation is float32 and the row scale multiplies the finished dot product once.
// Activations are not rounded to e4m3 here (bf16 in): at batch <= 8 the weights are the whole
// cost, and the extra rounding would only add error.
#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/fp8_kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 4;      // output rows per CTA: small CTAs keep the last wave short
constexpr int kUnroll = 4;     // 16-byte loads in flight per lane
constexpr int kStep = 32 * 16; // columns one warp covers per load

struct Fp8GemvArgs {
  const bf16* x;
  Fp8Projection proj[kFp8MaxProjections];
  int64_t row_end[kFp8MaxProjections];  // prefix sums of out_features
  int64_t k;
  int num_proj;
  int f32_out;
  int gated;  // Fp8GateAct
  int unused;
};

__device__ __forceinline__ uint4 load_stream(const uint8_t* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// 16 e4m3 codes (little-endian bytes: element 0 in the low byte) to floats.
__device__ __forceinline__ void unpack16(const uint4& u, float (&w)[16]) {
  const auto* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2 h(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3));
    const float2 f = __half22float2(h);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

template <int N>
__device__ __forceinline__ void fma16(const uint4& wv, const bf16* __restrict__ x, int64_t k, int64_t i,
                                      float (&acc)[N]) {
  float w[16];
  unpack16(wv, w);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float a[8], b[8];
    load8(x + t * k + i, a);
    load8(x + t * k + i + 8, b);
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(w[e], a[e], s);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(w[8 + e], b[e], s);
    acc[t] += s;
  }
}

// A round of kUnroll 16-byte loads of row wr from column i (lane's first), when whole.
__device__ __forceinline__ bool load_round(const uint8_t* wr, int64_t k, int64_t i, uint4 (&w)[kUnroll]) {
  if (i + (kUnroll - 1) * kStep >= k) return false;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) w[u] = load_stream(wr + i + u * kStep);
  return true;
}

// acc[t] = x[t, :] . codes of row wr, summed over the warp; `full` says whether the first round
// is already in w (issued before the PDL wait).
template <int N>
__device__ __forceinline__ void row_dot(const bf16* __restrict__ x, const uint8_t* wr, int64_t k, int lane, bool full,
                                        uint4 (&w)[kUnroll], float (&acc)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  int64_t i = static_cast<int64_t>(lane) * 16;
  while (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma16<N>(w[u], x, k, i + u * kStep, acc);
    i += kUnroll * kStep;
    full = load_round(wr, k, i, w);
  }
  for (; i < k; i += kStep) fma16<N>(load_stream(wr + i), x, k, i, acc);
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = warp_sum(acc[t]);
}

__device__ __forceinline__ float gate_act(float g, int act) {
  if (act == kFp8GeluTanh) {
    const float kAlpha = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kAlpha * (g + 0.044715f * g * g * g)));
  }
  return g / (1.0f + expf(-g));
}

template <int N>
__global__ void __launch_bounds__(kWarps * 32) fp8_gemv_kernel(Fp8GemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  // Gated: warp g owns row g of both gate (proj 0) and up (proj 1); else row g of the
  // concatenated projections.
  int p = 0;
  if (a.gated == kFp8NoAct) {
    while (p + 1 < a.num_proj && g >= a.row_end[p]) ++p;
  }
  const bool active = g < a.row_end[p];
  const int64_t r = g - (p == 0 ? 0 : a.row_end[p - 1]);
  const Fp8Projection& pr = a.proj[p];
  const int64_t k = a.k;
  const uint8_t* wr = static_cast<const uint8_t*>(pr.w) + r * k;
  // First round before the wait: weights are constant.
  uint4 w[kUnroll];
  const bool full = active && load_round(wr, k, static_cast<int64_t>(lane) * 16, w);
  pdl_begin();
  if (!active) return;
  float acc[N];
  row_dot<N>(a.x, wr, k, lane, full, w, acc);
  const int64_t m = pr.out_features;
  if (a.gated != kFp8NoAct) {
    const Fp8Projection& up = a.proj[1];
    const uint8_t* ur = static_cast<const uint8_t*>(up.w) + r * k;
    float uacc[N];
    row_dot<N>(a.x, ur, k, lane, load_round(ur, k, static_cast<int64_t>(lane) * 16, w), w, uacc);
    if (lane != 0) return;
    const float gs = pr.w_scales[r], us = up.w_scales[r];
#pragma unroll
    for (int t = 0; t < N; ++t) {
      // Rounded like the unfused ops: gate and up are bf16 tensors there.
      const float gv = __bfloat162float(__float2bfloat16(acc[t] * gs));
      const float uv = __bfloat162float(__float2bfloat16(uacc[t] * us));
      static_cast<bf16*>(up.y)[t * m + r] = __float2bfloat16(uv);
      static_cast<bf16*>(pr.y)[t * m + r] = __float2bfloat16(gate_act(gv, a.gated) * uv);
    }
    return;
  }
  if (lane != 0) return;
  const float scale = pr.w_scales[r];
  const float bias = pr.bias != nullptr ? pr.bias[r] : 0.0f;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    const float v = acc[t] * scale + bias;
    if (a.f32_out) static_cast<float*>(pr.y)[t * m + r] = v;
    else static_cast<bf16*>(pr.y)[t * m + r] = __float2bfloat16(v);
  }
}

template <int N>
void launch_n(const Fp8GemvArgs& a, unsigned blocks, cudaStream_t s) {
  launch(fp8_gemv_kernel<N>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace

bool fp8_gemv_supported(int64_t n, int64_t k) { return n >= 1 && n <= kFp8GemvMaxRows && k > 0 && k % 16 == 0; }

void launch_fp8_gemv(const void* x, const Fp8Projection* proj, int num_proj, int n, int64_t k, Elem out, int gated,
                     cudaStream_t s) {
  KVASIR_CHECK(fp8_gemv_supported(n, k) && num_proj >= 1 && num_proj <= kFp8MaxProjections && aligned16(x));
  KVASIR_CHECK(gated == kFp8NoAct ||
               (num_proj == 2 && out == Elem::kBf16 && proj[0].out_features == proj[1].out_features &&
                proj[0].bias == nullptr && proj[1].bias == nullptr));
  Fp8GemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.k = k;
  a.num_proj = num_proj;
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  a.gated = gated;
  int64_t rows = 0;
  for (int p = 0; p < num_proj; ++p) {
    KVASIR_CHECK(aligned16(proj[p].w));
    a.proj[p] = proj[p];
    rows += proj[p].out_features;
    a.row_end[p] = rows;
  }
  if (gated != kFp8NoAct) rows = a.row_end[0];  // one warp per gate/up row pair
  if (rows <= 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  switch (n) {
    case 1: launch_n<1>(a, blocks, s); break;
    case 2: launch_n<2>(a, blocks, s); break;
    case 3: launch_n<3>(a, blocks, s); break;
    case 4: launch_n<4>(a, blocks, s); break;
    case 5: launch_n<5>(a, blocks, s); break;
    case 6: launch_n<6>(a, blocks, s); break;
    case 7: launch_n<7>(a, blocks, s); break;
    default: launch_n<8>(a, blocks, s); break;
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
