// W4A16 for decode-sized batches (1..kW4a16GemvMaxRows tokens): bandwidth-bound, so the codes are
// streamed once with 16-byte non-caching loads and everything else is arranged around that.
// One CTA owns 16 output rows (one layout tile row, 512 bytes per 64 input columns); its 8 warps
// take interleaved 64-column chunks, so the CTA reads one contiguous 4 KiB window per step, with
// kUnroll chunks per warp in flight and the next round issued before the current one is used.
// Each chunk is 8 tensor-core mma (4 k16 steps x 2 n8 tiles) on the tokens zero-padded to 16 rows:
// per 8 weights a lane spends 3 integer/bf16 instructions to dequantize, fewer than a float FMA
// GEMV would spend per weight and token. Group scales multiply each group's float32 partial sums.
// The warps' partial tiles are summed through shared memory, then bias / gated activation.
// The first round of codes is requested before the PDL wait (weights are never written by an
// earlier kernel); activations only after it.
#include "backend/cuda/w4a16_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;

struct W4a16GemvArgs {
  const bf16* x;
  W4a16Projection proj[kW4a16MaxProjections];
  int64_t tile_end[kW4a16MaxProjections];  // prefix sums of out_features / 16
  int64_t k;
  int32_t num_proj, rows, f32_out, gated;
};

// A fragment of the k16 step whose lane column is kk: x rows g (and g + 8), zero past `rows`.
template <bool kRows16>
__device__ __forceinline__ void load_a(const bf16* __restrict__ x, int64_t k, int rows, int g, int64_t kk,
                                       uint32_t (&a)[4]) {
  const auto* r0 = reinterpret_cast<const uint32_t*>(x + g * k + kk);
  a[0] = g < rows ? __ldg(r0) : 0u;
  a[2] = g < rows ? __ldg(r0 + 4) : 0u;  // columns kk + 8, kk + 9
  if constexpr (kRows16) {
    const auto* r1 = reinterpret_cast<const uint32_t*>(x + (g + 8) * k + kk);
    a[1] = g + 8 < rows ? __ldg(r1) : 0u;
    a[3] = g + 8 < rows ? __ldg(r1 + 4) : 0u;
  } else {
    a[1] = 0u;
    a[3] = 0u;
  }
}

// acc[h] += chunk kc's contribution to output rows 16 nt + 8 h + 2t (+1) (C fragment order:
// tokens g, g, g + 8, g + 8). One group per chunk unless a group boundary splits it (groups of 32).
template <bool kRows16>
__device__ __forceinline__ void chunk(const W4a16Projection& pr, const uint4& v, const bf16* __restrict__ x, int64_t k,
                                      int rows, int64_t nt, int64_t kc, int g, int t, float (&acc)[2][4]) {
  const int64_t m = pr.out_features;
  const int64_t g0 = (kc * 64) / pr.group_size, g1 = (kc * 64 + 32) / pr.group_size;
  const bool split = g1 != g0;
  float tmp[2][4];
  uint32_t z2[2];
#pragma unroll
  for (int jh = 0; jh < 2; ++jh) {
    const int64_t grp = jh == 0 ? g0 : g1;
    if (jh == 0 || split) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int c = 0; c < 4; ++c) tmp[h][c] = 0.0f;
        z2[h] = w4a16_zero_pair(pr.zeros != nullptr ? pr.zeros[grp * m + nt * 16 + h * 8 + g] : 8u);
      }
    }
#pragma unroll
    for (int ksub = 0; ksub < 2; ++ksub) {
      uint32_t a[4];
      load_a<kRows16>(x, k, rows, g, kc * 64 + (2 * jh + ksub) * 16 + 2 * t, a);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t w = word_of(v, h * 2 + jh);
        mma_bf16(tmp[h], a, w4a16_pair(w, ksub * 2, z2[h]), w4a16_pair(w, ksub * 2 + 1, z2[h]));
      }
    }
    if (jh == 1 || split) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t c = nt * 16 + h * 8 + 2 * t;
        const float s0 = w4a16_scale(pr.scales, grp * m + c, pr.scale_type);
        const float s1 = w4a16_scale(pr.scales, grp * m + c + 1, pr.scale_type);
        acc[h][0] = fmaf(tmp[h][0], s0, acc[h][0]);
        acc[h][1] = fmaf(tmp[h][1], s1, acc[h][1]);
        acc[h][2] = fmaf(tmp[h][2], s0, acc[h][2]);
        acc[h][3] = fmaf(tmp[h][3], s1, acc[h][3]);
      }
    }
  }
}

template <int kProj, int kUnroll>
__device__ __forceinline__ void load_round(const uint8_t* const (&base)[kProj], int64_t kc0, int64_t chunks,
                                           uint4 (&w)[kProj][kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t kc = kc0 + static_cast<int64_t>(u) * kWarps;
#pragma unroll
    for (int i = 0; i < kProj; ++i) w[i][u] = kc < chunks ? w4a16_load_stream(base[i] + kc * 512) : make_uint4(0, 0, 0, 0);
  }
}

template <bool kRows16, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, 2) w4a16_gemv_kernel(W4a16GemvArgs a) {
  constexpr int kProj = kGated ? 2 : 1;
  constexpr int kUnroll = kGated ? 2 : 4;
  __shared__ float red[kWarps][kProj][16][16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x;
  int p = 0;
  if constexpr (!kGated) {
    while (p + 1 < a.num_proj && tile >= a.tile_end[p]) ++p;
  }
  const int64_t nt = tile - (p == 0 ? 0 : a.tile_end[p - 1]);
  const int64_t chunks = a.k / 64;
  const uint8_t* base[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    base[i] = static_cast<const uint8_t*>(a.proj[kGated ? i : p].codes) + (nt * chunks * 32 + lane) * 16;
  }
  float acc[kProj][2][4];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][h][c] = 0.0f;
    }
  }
  uint4 w[kProj][kUnroll];
  int64_t kc0 = warp;
  load_round<kProj, kUnroll>(base, kc0, chunks, w);
  pdl_begin();
  while (kc0 < chunks) {
    uint4 cur[kProj][kUnroll];
#pragma unroll
    for (int i = 0; i < kProj; ++i) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cur[i][u] = w[i][u];
    }
    const int64_t next = kc0 + kWarps * kUnroll;
    if (next < chunks) load_round<kProj, kUnroll>(base, next, chunks, w);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kc = kc0 + static_cast<int64_t>(u) * kWarps;
      if (kc >= chunks) break;
#pragma unroll
      for (int i = 0; i < kProj; ++i) {
        chunk<kRows16>(a.proj[kGated ? i : p], cur[i][u], a.x, a.k, a.rows, nt, kc, g, t, acc[i]);
      }
    }
    kc0 = next;
  }
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = h * 8 + 2 * t;
      red[warp][i][g][col] = acc[i][h][0];
      red[warp][i][g][col + 1] = acc[i][h][1];
      red[warp][i][g + 8][col] = acc[i][h][2];
      red[warp][i][g + 8][col + 1] = acc[i][h][3];
    }
  }
  __syncthreads();
  const int tok = threadIdx.x / 16, col = threadIdx.x % 16;  // 256 threads: the 16 x 16 tile
  if (tok >= a.rows) return;
  float sum[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    sum[i] = 0.0f;
#pragma unroll
    for (int w8 = 0; w8 < kWarps; ++w8) sum[i] += red[w8][i][tok][col];
  }
  const int64_t n = nt * 16 + col;
  if constexpr (kGated) {
    const W4a16Projection& gate = a.proj[0];
    const W4a16Projection& up = a.proj[1];
    const int64_t m = gate.out_features;
    // Rounded like the unfused ops: gate and up are bf16 tensors there.
    const float gv = __bfloat162float(__float2bfloat16(sum[0]));
    const float uv = __bfloat162float(__float2bfloat16(sum[1]));
    static_cast<bf16*>(up.y)[tok * m + n] = __float2bfloat16(uv);
    static_cast<bf16*>(gate.y)[tok * m + n] = __float2bfloat16(w4a16_gate_act(gv, a.gated) * uv);
  } else {
    const W4a16Projection& pr = a.proj[p];
    const float v = sum[0] + (pr.bias != nullptr ? pr.bias[n] : 0.0f);
    if (a.f32_out) static_cast<float*>(pr.y)[tok * pr.out_features + n] = v;
    else static_cast<bf16*>(pr.y)[tok * pr.out_features + n] = __float2bfloat16(v);
  }
}

}  // namespace

bool w4a16_shape_supported(int64_t out_features, int64_t in_features) {
  return out_features > 0 && in_features > 0 && out_features % 16 == 0 && in_features % 64 == 0;
}

void launch_w4a16_gemv(const void* x, const W4a16Projection* proj, int num_proj, int n, int64_t k, Elem out,
                       int gated, cudaStream_t s) {
  KVASIR_CHECK(n >= 1 && n <= kW4a16GemvMaxRows && num_proj >= 1 && num_proj <= kW4a16MaxProjections && aligned16(x));
  KVASIR_CHECK(gated == kW4a16NoAct ||
               (num_proj == 2 && out == Elem::kBf16 && proj[0].out_features == proj[1].out_features &&
                proj[0].bias == nullptr && proj[1].bias == nullptr));
  W4a16GemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.k = k;
  a.num_proj = num_proj;
  a.rows = n;
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  a.gated = gated;
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) {
    KVASIR_CHECK_MSG(w4a16_shape_supported(proj[p].out_features, k) && aligned16(proj[p].codes),
                     "W4A16 GEMV: out_features % 16, in_features % 64 and 16-byte aligned codes");
    a.proj[p] = proj[p];
    tiles += proj[p].out_features / 16;
    a.tile_end[p] = tiles;
  }
  if (gated != kW4a16NoAct) tiles = a.tile_end[0];  // gate/up tile pairs
  const unsigned blocks = static_cast<unsigned>(tiles);
  if (gated != kW4a16NoAct) {
    if (n > 8) launch(w4a16_gemv_kernel<true, true>, blocks, kWarps * 32, 0, s, a);
    else launch(w4a16_gemv_kernel<false, true>, blocks, kWarps * 32, 0, s, a);
  } else {
    if (n > 8) launch(w4a16_gemv_kernel<true, false>, blocks, kWarps * 32, 0, s, a);
    else launch(w4a16_gemv_kernel<false, false>, blocks, kWarps * 32, 0, s, a);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
