// Small-batch GEMV: y[t, r] = x[t, :] · w[r, :] (+ bias[r]) for up to kGemvMaxRows tokens, the
// decode path where reading the weights once is all that matters. One warp per output row, 16-byte
// non-caching weight loads, four in flight per lane; x comes from L1/L2. Fusions, so a decode
// layer is a handful of kernels: up to three projections of the same x in one launch (q/k/v);
// gate/up with the activation applied; an RMSNorm of the input folded in (each warp sums x^2 while
// it streams x anyway, and the first warp also writes the normed rows out); and a residual add in
// the epilogue (residual += bf16(x · w)).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;
constexpr int kStep = 32 * 8;  // elements of a row one warp covers per load
constexpr int64_t kPrefetchBytes = kUnroll * kStep * 2;

__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load_g8(const float* g, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(g);
  const float4 b = *reinterpret_cast<const float4*>(g + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <int N, bool kNorm>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const bf16* __restrict__ x, const float* __restrict__ g,
                                          int64_t k, int64_t i, float (&acc)[N], float (&ss)[N]) {
  float wf[8];
  unpack8(wv, wf);
  float gf[8];
  if constexpr (kNorm) load_g8(g + i, gf);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float xf[8];
    load8(x + t * k + i, xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if constexpr (kNorm) {
        ss[t] = fmaf(xf[e], xf[e], ss[t]);
        acc[t] = fmaf(wf[e], xf[e] * gf[e], acc[t]);
      } else {
        acc[t] = fmaf(wf[e], xf[e], acc[t]);
      }
    }
  }
}

// acc[t] = x[t, :] (* g) · wr, summed over the warp; with kNorm also ss[t] = sum x[t, :]^2.
// Four 16-byte loads per lane are issued before any is used. (Measured on the H200: deeper
// unrolling and interleaving the gate and up rows were both slower, from register pressure.)
template <int N, bool kNorm>
__device__ __forceinline__ void row_dot(const bf16* __restrict__ x, const float* __restrict__ g,
                                        const bf16* __restrict__ wr, int64_t k, int lane, float (&acc)[N],
                                        float (&ss)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = ss[t] = 0.0f;
  int64_t i = lane * 8;
  for (; i + (kUnroll - 1) * kStep < k; i += kUnroll * kStep) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + i + u * kStep);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_chunk<N, kNorm>(wv[u], x, g, k, i + u * kStep, acc, ss);
  }
  for (; i < k; i += kStep) fma_chunk<N, kNorm>(load_stream(wr + i), x, g, k, i, acc, ss);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    acc[t] = warp_sum(acc[t]);
    if constexpr (kNorm) ss[t] = warp_sum(ss[t]);
  }
}

// inv[t] = 1 / rms(x[t]); the first warp of the grid also writes h = x * inv * g.
template <int N, bool kNorm>
__device__ __forceinline__ void finish_norm(const GemvInput& in, int64_t k, int lane, bool writer, const float (&ss)[N],
                                            float (&inv)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) inv[t] = kNorm ? 1.0f / sqrtf(ss[t] / static_cast<float>(k) + in.eps) : 1.0f;
  if (kNorm && writer && in.h_out != nullptr) {
    const auto* x = static_cast<const bf16*>(in.x);
    for (int64_t i = lane * 8; i < k; i += kStep) {
      float gf[8];
      load_g8(in.norm_w + i, gf);
#pragma unroll
      for (int t = 0; t < N; ++t) {
        float xf[8];
        load8(x + t * k + i, xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) xf[e] = xf[e] * inv[t] * gf[e];
        store8(static_cast<bf16*>(in.h_out) + t * k + i, xf);
      }
    }
  }
}

struct Segments {
  GemvOut seg[kGemvMaxOutputs];
  int num;
};

// Weights are never written by an earlier kernel: each warp pulls the first round of its row
// (kPrefetchBytes) into L2 before it waits for the previous kernel (programmatic dependent launch),
// so this kernel's first loads overlap the previous one's tail. Only the first round: whole rows
// prefetched by early CTAs overflowed L2 and were read twice (measured: +1.1 ms per batch-1 step).
template <int N, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvInput in, Segments segs, int64_t k, bool f32_out) {
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t r = int64_t{blockIdx.x} * kWarps + warp;
  // Which projection this row belongs to, without indexing the parameter array at run time
  // (that would copy it to local memory).
  static_assert(kGemvMaxOutputs == 3, "segment selection below is unrolled for three");
  GemvOut g = segs.seg[0];
  if (r >= g.m) {
    r -= g.m;
    if (segs.num < 2) return;
    g = segs.seg[1];
    if (r >= g.m) {
      r -= g.m;
      if (segs.num < 3) return;
      g = segs.seg[2];
      if (r >= g.m) return;
    }
  }
  const bf16* wr = static_cast<const bf16*>(g.w) + r * k;
  prefetch_l2_warp(wr, (2 * k < kPrefetchBytes ? 2 * k : kPrefetchBytes), lane);
  pdl_wait();
  const auto* x = static_cast<const bf16*>(in.x);
  float acc[N], ss[N], inv[N];
  row_dot<N, kNorm>(x, in.norm_w, wr, k, lane, acc, ss);
  finish_norm<N, kNorm>(in, k, lane, blockIdx.x == 0 && warp == 0, ss, inv);
  if (lane == 0) {
    const float b = g.bias != nullptr ? g.bias[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float v = acc[t] * inv[t] + b;
      if (g.residual != nullptr) {
        const bf16 o = __float2bfloat16_rn(v);
        if (g.y != nullptr) static_cast<bf16*>(g.y)[t * g.m + r] = o;
        bf16* res = static_cast<bf16*>(g.residual) + t * g.m + r;
        *res = __float2bfloat16_rn(__bfloat162float(*res) + __bfloat162float(o));
      } else if (f32_out) {
        static_cast<float*>(g.y)[t * g.m + r] = v;
      } else {
        static_cast<bf16*>(g.y)[t * g.m + r] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int N, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32) gemv_gated_kernel(GemvInput in, const bf16* __restrict__ wg,
                                                                 const bf16* __restrict__ wu, int64_t m, int64_t k,
                                                                 bool gelu_tanh, bf16* __restrict__ y,
                                                                 bf16* __restrict__ up_out) {
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.x} * kWarps + warp;
  if (r >= m) {
    pdl_wait();
    return;
  }
  prefetch_l2_warp(wg + r * k, (2 * k < kPrefetchBytes ? 2 * k : kPrefetchBytes), lane);
  prefetch_l2_warp(wu + r * k, (2 * k < kPrefetchBytes ? 2 * k : kPrefetchBytes), lane);
  pdl_wait();
  const auto* x = static_cast<const bf16*>(in.x);
  float g[N], u[N], ss[N], ss2[N], inv[N];
  row_dot<N, kNorm>(x, in.norm_w, wg + r * k, k, lane, g, ss);
  row_dot<N, kNorm>(x, in.norm_w, wu + r * k, k, lane, u, ss2);
  finish_norm<N, kNorm>(in, k, lane, blockIdx.x == 0 && warp == 0, ss, inv);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < N; ++t) {
      // Rounded like the unfused ops: gate and up are bf16 tensors there.
      const float gv = __bfloat162float(__float2bfloat16_rn(g[t] * inv[t]));
      const float uv = __bfloat162float(__float2bfloat16_rn(u[t] * inv[t]));
      float a;
      if (gelu_tanh) {
        const float kAlpha = 0.7978845608028654f;
        a = 0.5f * gv * (1.0f + tanhf(kAlpha * (gv + 0.044715f * gv * gv * gv)));
      } else {
        a = gv / (1.0f + expf(-gv));
      }
      if (up_out != nullptr) up_out[t * m + r] = __float2bfloat16_rn(uv);
      y[t * m + r] = __float2bfloat16_rn(a * uv);
    }
  }
}

template <int N>
void launch_multi_n(const GemvInput& in, const Segments& segs, int64_t rows, int64_t k, Elem out, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const bool f32 = out == Elem::kF32;
  if (in.norm_w != nullptr) launch(gemv_kernel<N, true>, blocks, kWarps * 32, 0, s, in, segs, k, f32);
  else launch(gemv_kernel<N, false>, blocks, kWarps * 32, 0, s, in, segs, k, f32);
}

template <int N>
void launch_gated_n(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                    bf16* up_out, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((m + kWarps - 1) / kWarps);
  if (in.norm_w != nullptr) launch(gemv_gated_kernel<N, true>, blocks, kWarps * 32, 0, s, in, wg, wu, m, k, gelu, y, up_out);
  else launch(gemv_gated_kernel<N, false>, blocks, kWarps * 32, 0, s, in, wg, wu, m, k, gelu, y, up_out);
}

}  // namespace

bool gemv_supported(int64_t n, int64_t k) { return n >= 1 && n <= kGemvMaxRows && k % 8 == 0; }

void launch_gemv_multi(const GemvInput& in, const GemvOut* outs, int num, int n, int64_t k, Elem out, cudaStream_t s) {
  KVASIR_CHECK(num >= 1 && num <= kGemvMaxOutputs);
  Segments segs{};
  int64_t rows = 0;
  for (int i = 0; i < num; ++i) {
    segs.seg[i] = outs[i];
    rows += outs[i].m;
  }
  segs.num = num;
  switch (n) {
    case 1: launch_multi_n<1>(in, segs, rows, k, out, s); break;
    case 2: launch_multi_n<2>(in, segs, rows, k, out, s); break;
    case 3: launch_multi_n<3>(in, segs, rows, k, out, s); break;
    case 4: launch_multi_n<4>(in, segs, rows, k, out, s); break;
    case 5: launch_multi_n<5>(in, segs, rows, k, out, s); break;
    case 6: launch_multi_n<6>(in, segs, rows, k, out, s); break;
    case 7: launch_multi_n<7>(in, segs, rows, k, out, s); break;
    case 8: launch_multi_n<8>(in, segs, rows, k, out, s); break;
    default: KVASIR_CHECK_MSG(false, "gemv: unsupported row count");
  }
}

void launch_gemv(const void* x, const void* w, const float* bias, int n, int64_t m, int64_t k, void* y, Elem out,
                 cudaStream_t s) {
  const GemvOut o{w, bias, y, m, nullptr};
  launch_gemv_multi(GemvInput{x, nullptr, 0.0f, nullptr}, &o, 1, n, k, out, s);
}

void launch_gemv_gated(const GemvInput& in, const void* w_gate, const void* w_up, int n, int64_t m, int64_t k,
                       bool gelu_tanh, void* y, void* up_out, cudaStream_t s) {
  const auto* wg = static_cast<const bf16*>(w_gate);
  const auto* wu = static_cast<const bf16*>(w_up);
  auto* out = static_cast<bf16*>(y);
  auto* up = static_cast<bf16*>(up_out);
  switch (n) {
    case 1: launch_gated_n<1>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 2: launch_gated_n<2>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 3: launch_gated_n<3>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 4: launch_gated_n<4>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 5: launch_gated_n<5>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 6: launch_gated_n<6>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 7: launch_gated_n<7>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    case 8: launch_gated_n<8>(in, wg, wu, m, k, gelu_tanh, out, up, s); break;
    default: KVASIR_CHECK_MSG(false, "gemv: unsupported row count");
  }
}

}  // namespace kvasir::cuda
