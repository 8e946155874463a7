// moe_experts for a few tokens (decode): GEMVs that read only the chosen experts' rows, the expert
// of each (token, slot) read from the routing ids on the device. Two kernels:
//  - gate/up: a CTA per (slot, 8 rows of I), a warp per row: the gate and up rows of the slot's
//    expert against the token's x, biases, the activation -> act[slot, i] (bf16). Slots are the
//    fastest grid dimension, so two tokens that chose the same expert read its rows back to back
//    (the second read comes from L2).
//  - down + un-permute: a warp per output row h, for each token the top_k rows h of its experts'
//    down weights against the slots' act rows, summed as out[t, h] = sum_j w[t, j] * (dot + bias)
//    in slot order (the CPU's formula and order): deterministic, no atomics, no y buffer.
// 16-byte streaming weight loads with several in flight per lane where shapes allow; scalar
// loads otherwise (any H, I).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/moe_common.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kChunk = 32 * 8;  // elements a warp covers per 16-byte load round
constexpr int kDownSlots = 8;   // slots whose dots a warp runs side by side in the down kernel

__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ float dot8(const uint4& w, const bf16* x) {
  float xf[8];
  load8(x, xf);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc = fmaf(f.x, xf[2 * i], acc);
    acc = fmaf(f.y, xf[2 * i + 1], acc);
  }
  return acc;
}

template <bool kVec>
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_gemv_kernel(MoeProblem p, bf16* __restrict__ act) {
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t slot = blockIdx.x;
  const int64_t i = int64_t{blockIdx.y} * kWarps + warp;
  if (i >= p.inter) return;
  bf16* dst = act + slot * p.inter + i;
  const int e = p.ids[slot];
  if (e < 0 || e >= p.num_experts) {
    if (lane == 0) *dst = __float2bfloat16_rn(0.0f);
    return;
  }
  const MoeExpertPtrs ex = p.experts[e];
  const int64_t H = p.hidden;
  const bf16* x = static_cast<const bf16*>(p.x) + (slot / p.top_k) * H;
  const bf16* wg = static_cast<const bf16*>(ex.w_gate) + i * p.gu_row_stride;
  const bf16* wu = static_cast<const bf16*>(ex.w_up) + i * p.gu_row_stride;
  float g = 0.0f, u = 0.0f;
  if constexpr (kVec) {
    int64_t k = lane * 8;
    for (; k + 3 * kChunk < H; k += 4 * kChunk) {
      uint4 a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[r] = load_stream(wg + k + r * kChunk);
        b[r] = load_stream(wu + k + r * kChunk);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        g += dot8(a[r], x + k + r * kChunk);
        u += dot8(b[r], x + k + r * kChunk);
      }
    }
    for (; k < H; k += kChunk) {
      g += dot8(load_stream(wg + k), x + k);
      u += dot8(load_stream(wu + k), x + k);
    }
  } else {
    for (int64_t k = lane; k < H; k += 32) {
      const float xv = __bfloat162float(x[k]);
      g = fmaf(__bfloat162float(wg[k]), xv, g);
      u = fmaf(__bfloat162float(wu[k]), xv, u);
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    if (ex.b_gate != nullptr) g += ex.b_gate[i * p.gu_bias_stride];
    if (ex.b_up != nullptr) u += ex.b_up[i * p.gu_bias_stride];
    *dst = __float2bfloat16_rn(moe_activate(p.act, g, u, p.alpha, p.limit));
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kWarps * 32) moe_down_gemv_kernel(MoeProblem p, const bf16* __restrict__ act) {
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = int64_t{blockIdx.x} * kWarps + warp;
  if (h >= p.hidden) return;
  const int64_t I = p.inter, K = p.top_k;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    float o = 0.0f;  // meaningful on lane 0
    for (int64_t j0 = 0; j0 < K; j0 += kDownSlots) {
      const bf16* wr[kDownSlots];
      const bf16* ar[kDownSlots];
      float d[kDownSlots];
      bool live[kDownSlots];
#pragma unroll
      for (int q = 0; q < kDownSlots; ++q) {
        const int64_t j = j0 + q;
        const int e = j < K ? p.ids[t * K + j] : -1;
        live[q] = e >= 0 && e < p.num_experts;
        wr[q] = live[q] ? static_cast<const bf16*>(p.experts[e].w_down) + h * I : nullptr;
        ar[q] = act + (t * K + j) * I;
        d[q] = 0.0f;
      }
      if constexpr (kVec) {
        int64_t k = lane * 8;
        for (; k + kChunk < I; k += 2 * kChunk) {
          uint4 w0[kDownSlots], w1[kDownSlots];
#pragma unroll
          for (int q = 0; q < kDownSlots; ++q) {
            w0[q] = live[q] ? load_stream(wr[q] + k) : make_uint4(0, 0, 0, 0);
            w1[q] = live[q] ? load_stream(wr[q] + k + kChunk) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int q = 0; q < kDownSlots; ++q) {
            if (live[q]) d[q] += dot8(w0[q], ar[q] + k) + dot8(w1[q], ar[q] + k + kChunk);
          }
        }
        for (; k < I; k += kChunk) {
#pragma unroll
          for (int q = 0; q < kDownSlots; ++q) {
            if (live[q]) d[q] += dot8(load_stream(wr[q] + k), ar[q] + k);
          }
        }
      } else {
        for (int64_t k = lane; k < I; k += 32) {
#pragma unroll
          for (int q = 0; q < kDownSlots; ++q) {
            if (live[q]) d[q] = fmaf(__bfloat162float(wr[q][k]), __bfloat162float(ar[q][k]), d[q]);
          }
        }
      }
#pragma unroll
      for (int q = 0; q < kDownSlots; ++q) d[q] = warp_sum(d[q]);
      if (lane == 0) {
#pragma unroll
        for (int q = 0; q < kDownSlots; ++q) {
          if (!live[q]) continue;
          const int64_t slot = t * K + j0 + q;
          const float* bd = p.experts[p.ids[slot]].b_down;
          o += p.weights[slot] * (bd != nullptr ? d[q] + bd[h] : d[q]);
        }
      }
    }
    if (lane == 0) static_cast<bf16*>(p.out)[t * p.hidden + h] = __float2bfloat16_rn(o);
  }
}

}  // namespace

void launch_moe_gemv(const MoeProblem& p, void* act, bool vec, cudaStream_t s) {
  if (p.num_tokens <= 0) return;
  const int64_t slots = p.num_tokens * p.top_k;
  KVASIR_CHECK_MSG(slots <= 0x7fffffff && (p.inter + kWarps - 1) / kWarps <= 65535, "moe gemv: shape too large");
  const dim3 gu_grid(static_cast<unsigned>(slots), static_cast<unsigned>((p.inter + kWarps - 1) / kWarps));
  const unsigned down_blocks = static_cast<unsigned>((p.hidden + kWarps - 1) / kWarps);
  auto* a = static_cast<bf16*>(act);
  if (vec) {
    launch(moe_gate_up_gemv_kernel<true>, gu_grid, kWarps * 32, 0, s, p, a);
    KVASIR_CUDA_LAUNCH_CHECK();
    launch(moe_down_gemv_kernel<true>, down_blocks, kWarps * 32, 0, s, p, static_cast<const bf16*>(a));
  } else {
    launch(moe_gate_up_gemv_kernel<false>, gu_grid, kWarps * 32, 0, s, p, a);
    KVASIR_CUDA_LAUNCH_CHECK();
    launch(moe_down_gemv_kernel<false>, down_blocks, kWarps * 32, 0, s, p, static_cast<const bf16*>(a));
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
