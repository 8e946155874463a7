// FP8 GEMV for decode-sized batches: y[t, r] = (x[t, :] · codes[r, :]) * scale[r] (+ bias[r]) for
// up to kFp8GemvMaxRows tokens and up to three projections of one x (q/k/v) in one launch, or
// gate/up with the gated activation. As the bf16 GEMV (gemv.cu) it lives on weight bandwidth:
// 16-byte non-caching loads (16 codes each, 512 columns per warp step), four in flight per lane.
// One token: one warp per output row, the first round issued before the kernel waits for the
// previous one (weights are never written by an earlier kernel). 2..8 tokens: one warp per row
// pair, so each x chunk read from L1 serves two rows.
// Codes become floats through the hardware e4m3x2 -> f16x2 conversion; x (bf16) comes from L1/L2;
// accumulation is float32 and the row scale multiplies the finished dot product once.
// Activations are not rounded to e4m3 here (bf16 in): at batch <= 8 the weights are the whole
// cost, and the extra rounding would only add error.
#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gate_activation.cuh"
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
  int gated;  // GateAct
  int unused;
};

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

__device__ __forceinline__ float gate_act(float g, int act) { return gate_activation(g, act == kGateGeluTanh); }

// Lane 0's outputs: y[t, r] = acc[t] * scale[r] (+ bias[r]) of one projection row.
template <int N>
__device__ __forceinline__ void write_row(const Fp8Projection& pr, int64_t r, bool f32_out, const float (&acc)[N]) {
  const float scale = pr.w_scales[r];
  const float bias = pr.bias != nullptr ? pr.bias[r] : 0.0f;
  const int64_t m = pr.out_features;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    const float v = acc[t] * scale + bias;
    if (f32_out) static_cast<float*>(pr.y)[t * m + r] = v;
    else static_cast<bf16*>(pr.y)[t * m + r] = __float2bfloat16(v);
  }
}

// Lane 0's gated outputs of row r: up.y = bf16(up), gate.y = bf16(act(bf16(gate)) * bf16(up)).
template <int N>
__device__ __forceinline__ void write_gated(const Fp8Projection& gate, const Fp8Projection& up, int64_t r, int act,
                                            const float (&g)[N], const float (&u)[N]) {
  const float gs = gate.w_scales[r], us = up.w_scales[r];
  const int64_t m = gate.out_features;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    // Rounded like the unfused ops: gate and up are bf16 tensors there.
    const float gv = __bfloat162float(__float2bfloat16(g[t] * gs));
    const float uv = __bfloat162float(__float2bfloat16(u[t] * us));
    static_cast<bf16*>(up.y)[t * m + r] = __float2bfloat16(uv);
    static_cast<bf16*>(gate.y)[t * m + r] = __float2bfloat16(gate_act(gv, act) * uv);
  }
}

// Two rows at once for 2..8 tokens: each x chunk loaded once feeds both rows (x comes from L1,
// whose bandwidth, not DRAM's, bounds a one-row warp once several tokens share the weights).
template <int N>
__device__ __forceinline__ void fma16x2(const uint4& wv0, const uint4& wv1, const bf16* __restrict__ x, int64_t k,
                                        int64_t i, float (&a0)[N], float (&a1)[N]) {
  float w0[16], w1[16];
  unpack16(wv0, w0);
  unpack16(wv1, w1);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float xa[8], xb[8];
    load8(x + t * k + i, xa);
    load8(x + t * k + i + 8, xb);
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s0 = fmaf(w0[e], xa[e], s0), s1 = fmaf(w1[e], xa[e], s1);
#pragma unroll
    for (int e = 0; e < 8; ++e) s0 = fmaf(w0[8 + e], xb[e], s0), s1 = fmaf(w1[8 + e], xb[e], s1);
    a0[t] += s0;
    a1[t] += s1;
  }
}

template <int N>
__device__ __forceinline__ void row_dot2(const bf16* __restrict__ x, const uint8_t* w0, const uint8_t* w1, int64_t k,
                                         int lane, float (&a0)[N], float (&a1)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) a0[t] = 0.0f, a1[t] = 0.0f;
  int64_t i = static_cast<int64_t>(lane) * 16;
  for (; i + kStep < k; i += 2 * kStep) {  // four 16-byte loads in flight, two per row
    const uint4 p0 = load_stream(w0 + i), p1 = load_stream(w0 + i + kStep);
    const uint4 q0 = load_stream(w1 + i), q1 = load_stream(w1 + i + kStep);
    fma16x2<N>(p0, q0, x, k, i, a0, a1);
    fma16x2<N>(p1, q1, x, k, i + kStep, a0, a1);
  }
  for (; i < k; i += kStep) fma16x2<N>(load_stream(w0 + i), load_stream(w1 + i), x, k, i, a0, a1);
#pragma unroll
  for (int t = 0; t < N; ++t) a0[t] = warp_sum(a0[t]), a1[t] = warp_sum(a1[t]);
}

// 2..8 tokens: warp g owns rows 2g and 2g + 1 of the concatenated projections (every projection
// has an even number of rows: FP8 weights have out_features % 16 == 0), or gated, row g of gate
// and of up.
template <int N>
__global__ void __launch_bounds__(kWarps * 32) fp8_gemv2_kernel(Fp8GemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool gated = a.gated != kGateNone;
  pdl_begin();
  int p = 0;
  int64_t r0 = g;
  if (gated) {
    if (g >= a.row_end[0]) return;
  } else {
    const int64_t row = 2 * g;
    while (p + 1 < a.num_proj && row >= a.row_end[p]) ++p;
    if (row >= a.row_end[p]) return;
    r0 = row - (p == 0 ? 0 : a.row_end[p - 1]);
  }
  const Fp8Projection& first = a.proj[p];
  const Fp8Projection& second = gated ? a.proj[1] : first;
  const int64_t r1 = gated ? r0 : r0 + 1;
  float a0[N], a1[N];
  row_dot2<N>(a.x, static_cast<const uint8_t*>(first.w) + r0 * a.k, static_cast<const uint8_t*>(second.w) + r1 * a.k,
              a.k, lane, a0, a1);
  if (lane != 0) return;
  if (gated) {
    write_gated<N>(first, second, r0, a.gated, a0, a1);
  } else {
    write_row<N>(first, r0, a.f32_out != 0, a0);
    write_row<N>(first, r1, a.f32_out != 0, a1);
  }
}

template <int N>
__global__ void __launch_bounds__(kWarps * 32) fp8_gemv_kernel(Fp8GemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  // Gated: warp g owns row g of both gate (proj 0) and up (proj 1); else row g of the
  // concatenated projections.
  int p = 0;
  if (a.gated == kGateNone) {
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
  if (a.gated != kGateNone) {
    const Fp8Projection& up = a.proj[1];
    const uint8_t* ur = static_cast<const uint8_t*>(up.w) + r * k;
    float uacc[N];
    row_dot<N>(a.x, ur, k, lane, load_round(ur, k, static_cast<int64_t>(lane) * 16, w), w, uacc);
    if (lane == 0) write_gated<N>(pr, up, r, a.gated, acc, uacc);
    return;
  }
  if (lane == 0) write_row<N>(pr, r, a.f32_out != 0, acc);
}

// One warp per row (per gate/up pair) for a single token, per row pair for 2..8.
template <int N>
void launch_n(const Fp8GemvArgs& a, int64_t rows, cudaStream_t s) {
  const int64_t warps = N == 1 || a.gated != kGateNone ? rows : rows / 2;
  const unsigned blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  if constexpr (N == 1) launch(fp8_gemv_kernel<N>, blocks, kWarps * 32, 0, s, a);
  else launch(fp8_gemv2_kernel<N>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace

bool fp8_gemv_supported(int64_t n, int64_t k) { return n >= 1 && n <= kFp8GemvMaxRows && k > 0 && k % 16 == 0; }

void launch_fp8_gemv(const void* x, const Fp8Projection* proj, int num_proj, int n, int64_t k, Elem out, int gated,
                     cudaStream_t s) {
  KVASIR_CHECK(fp8_gemv_supported(n, k) && num_proj >= 1 && num_proj <= kFp8MaxProjections && aligned16(x));
  KVASIR_CHECK(gated == kGateNone ||
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
  if (gated != kGateNone) rows = a.row_end[0];  // gate/up row pairs
  if (rows <= 0) return;
  for (int p = 0; p < num_proj; ++p) KVASIR_CHECK_MSG(proj[p].out_features % 2 == 0, "FP8 GEMV: odd out_features");
  switch (n) {
    case 1: launch_n<1>(a, rows, s); break;
    case 2: launch_n<2>(a, rows, s); break;
    case 3: launch_n<3>(a, rows, s); break;
    case 4: launch_n<4>(a, rows, s); break;
    case 5: launch_n<5>(a, rows, s); break;
    case 6: launch_n<6>(a, rows, s); break;
    case 7: launch_n<7>(a, rows, s); break;
    default: launch_n<8>(a, rows, s); break;
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
