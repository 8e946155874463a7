// moe_experts for a few tokens (decode): GEMVs that read only the chosen experts' rows, the expert
// of each (token, slot) read from the routing ids on the device. Two kernels:
//  - gate/up: a CTA per (slot, 8 rows of I), a warp per row: the gate and up rows of the slot's
//    expert against the token's x, biases, the activation -> act[slot, i] (bf16). Slots are the
//    fastest grid dimension, so two tokens that chose the same expert read its rows back to back
//    (the second read comes from L2).
//  - down + un-permute: a CTA per (token, a few output rows h), its warps over the (slot, row)
//    dots: the rows h of the token's experts' down weights against the slots' act rows, summed as
//    out[t, h] = sum_j w[t, j] * (dot + bias) in slot order (the CPU's formula and order):
//    deterministic, no atomics, no y buffer.
// 16-byte streaming weight loads with several in flight per lane where shapes allow; scalar
// loads otherwise (any H, I).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_route.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = kMoeGateUpRowsPerCta;  // the gate/up kernel's warps, a row each
constexpr int kChunk = 32 * 8;  // elements a warp covers per 16-byte load round

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

// Six CTAs per SM (at most 42 registers): a 768-row expert's 8 slots (768 CTAs) in one wave.
// kRoute: the variant that routes its token itself (p.route), given room for the routing code
// (four per SM); moe_fold_route (moe_kernels.h) chooses by the wave count.
template <bool kVec, bool kRoute>
__global__ void __launch_bounds__(kWarps * 32, kRoute ? kMoeGateUpRoutedCtasPerSm : kMoeGateUpCtasPerSm) moe_gate_up_gemv_kernel(MoeProblem p, bf16* __restrict__ act) {
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t slot = blockIdx.x;
  const int64_t i = int64_t{blockIdx.y} * kWarps + warp;
  int e = -1;
  if constexpr (kRoute) {
    // The folded moe_route: warp 0 routes this slot's token (every CTA of the token computes the
    // same choice, bit for bit); the token's first slot in the first row block stores it for the
    // down kernel and the caller.
    extern __shared__ __align__(16) unsigned char gu_route_smem[];
    __shared__ int chosen;
    const int64_t t = slot / p.top_k;
    if (warp == 0) {
      const RouteResult r = route_token(p.route, t, gu_route_smem, lane);
      if (lane == 0) chosen = r.ids[slot % p.top_k];
      if (blockIdx.y == 0 && slot % p.top_k == 0) store_route(p.route, t, r, lane);
    }
    __syncthreads();
    e = chosen - static_cast<int>(p.first_expert);
  }
  if (i >= p.inter) return;
  bf16* dst = act + slot * p.inter + i;
  if constexpr (!kRoute) e = p.ids[slot] - static_cast<int>(p.first_expert);
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

// The (slot, output row) dots of one CTA, kDownItemsPerWarp per warp, all of a warp's weight
// loads in flight together. Rows per CTA: kDownItems / top_k (at least 1), so a CTA reads the same
// bytes whatever the routing's top_k (4 rows of 8 slots, 16 rows of 2, 32 rows of a lone expert).
constexpr int kDownItemsPerWarp = 4;
constexpr int kDownItems = kWarps * kDownItemsPerWarp;

inline int down_rows_per_cta(int64_t top_k) { return top_k >= kDownItems ? 1 : static_cast<int>(kDownItems / top_k); }

// out[t, h] = sum_j w[t, j] * (dot(down_e(j)[h], act[t, j]) + bias), j in slot order (the CPU's
// formula and order): each warp writes its dots to shared memory, then one thread per row sums
// them in slot order: deterministic, no atomics. Item it of the CTA is (slot it % K, row it / K),
// so the K slots of one row are read by K different warps side by side. Four CTAs per SM (64
// registers) keep a 2048-wide model's 512 CTAs in one wave.
template <bool kVec>
__global__ void __launch_bounds__(kWarps * 32, 4) moe_down_gemv_kernel(MoeProblem p, const bf16* __restrict__ act,
                                                                       int rows_per_cta) {
  extern __shared__ float down_dots[];  // [rows_per_cta * K]
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y, h0 = int64_t{blockIdx.x} * rows_per_cta;
  const int64_t I = p.inter, K = p.top_k, H = p.hidden;
  const int64_t items = K * rows_per_cta;
  for (int64_t it0 = warp; it0 < items; it0 += int64_t{kWarps} * kDownItemsPerWarp) {
    const bf16* wr[kDownItemsPerWarp];
    const bf16* ar[kDownItemsPerWarp];
    float d[kDownItemsPerWarp];
    bool live[kDownItemsPerWarp];
#pragma unroll
    for (int u = 0; u < kDownItemsPerWarp; ++u) {
      const int64_t it = it0 + int64_t{u} * kWarps;
      const int64_t j = it % K, h = h0 + it / K;
      const int e = it < items && h < H ? p.ids[t * K + j] - static_cast<int>(p.first_expert) : -1;
      live[u] = e >= 0 && e < p.num_experts;
      wr[u] = live[u] ? static_cast<const bf16*>(p.experts[e].w_down) + h * I : nullptr;
      ar[u] = act + (t * K + j) * I;
      d[u] = 0.0f;
    }
    if constexpr (kVec) {
      for (int64_t k = lane * 8; k < I; k += kChunk) {
        uint4 w[kDownItemsPerWarp];
#pragma unroll
        for (int u = 0; u < kDownItemsPerWarp; ++u) w[u] = live[u] ? load_stream(wr[u] + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kDownItemsPerWarp; ++u) {
          if (live[u]) d[u] += dot8(w[u], ar[u] + k);
        }
      }
    } else {
      for (int64_t k = lane; k < I; k += 32) {
#pragma unroll
        for (int u = 0; u < kDownItemsPerWarp; ++u) {
          if (live[u]) d[u] = fmaf(__bfloat162float(wr[u][k]), __bfloat162float(ar[u][k]), d[u]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kDownItemsPerWarp; ++u) {
      d[u] = warp_sum(d[u]);
      const int64_t it = it0 + int64_t{u} * kWarps;
      if (lane == 0 && it < items) down_dots[it] = d[u];
    }
  }
  __syncthreads();
  for (int r = threadIdx.x; r < rows_per_cta; r += blockDim.x) {
    const int64_t h = h0 + r;
    if (h >= H) break;
    float o = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t slot = t * K + j;
      const int e = p.ids[slot] - static_cast<int>(p.first_expert);
      if (e < 0 || e >= p.num_experts) continue;
      const float* bd = p.experts[e].b_down;
      const float dj = down_dots[r * K + j];
      o += p.weights[slot] * (bd != nullptr ? dj + bd[h] : dj);
    }
    static_cast<bf16*>(p.out)[t * H + h] = __float2bfloat16_rn(o);
  }
}

}  // namespace

void launch_moe_gemv(const MoeProblem& p, void* act, bool vec, cudaStream_t s) {
  if (p.num_tokens <= 0) return;
  const int64_t slots = p.num_tokens * p.top_k;
  const int rows = down_rows_per_cta(p.top_k);
  const int64_t down_blocks = (p.hidden + rows - 1) / rows;
  KVASIR_CHECK_MSG(slots <= 0x7fffffff && (p.inter + kWarps - 1) / kWarps <= 65535 && p.num_tokens <= 65535 &&
                       down_blocks <= 0x7fffffff,
                   "moe gemv: shape too large");
  const size_t down_smem = static_cast<size_t>(rows) * static_cast<size_t>(p.top_k) * sizeof(float);
  KVASIR_CHECK_MSG(down_smem <= 48 * 1024, "moe gemv: top_k too large");
  const dim3 gu_grid(static_cast<unsigned>(slots), static_cast<unsigned>((p.inter + kWarps - 1) / kWarps));
  size_t gu_smem = 0;
  if (p.route.logits != nullptr) {
    KVASIR_CHECK_MSG(p.route.num_experts <= kMoeFusedRouteMaxExperts && p.route.top_k == p.top_k &&
                         p.route.num_tokens == p.num_tokens,
                     "moe gemv: routing folded into a shape it does not fit");
    gu_smem = static_cast<size_t>(route_scratch_bytes(p.route.num_experts, p.route.num_groups, p.route.top_k));
  }
  const dim3 down_grid(static_cast<unsigned>(down_blocks), static_cast<unsigned>(p.num_tokens));
  auto* a = static_cast<bf16*>(act);
  const bool route = p.route.logits != nullptr;
  if (vec) {
    if (route) launch(moe_gate_up_gemv_kernel<true, true>, gu_grid, kWarps * 32, gu_smem, s, p, a);
    else launch(moe_gate_up_gemv_kernel<true, false>, gu_grid, kWarps * 32, gu_smem, s, p, a);
    KVASIR_CUDA_LAUNCH_CHECK();
    launch(moe_down_gemv_kernel<true>, down_grid, kWarps * 32, down_smem, s, p, static_cast<const bf16*>(a), rows);
  } else {
    if (route) launch(moe_gate_up_gemv_kernel<false, true>, gu_grid, kWarps * 32, gu_smem, s, p, a);
    else launch(moe_gate_up_gemv_kernel<false, false>, gu_grid, kWarps * 32, gu_smem, s, p, a);
    KVASIR_CUDA_LAUNCH_CHECK();
    launch(moe_down_gemv_kernel<false>, down_grid, kWarps * 32, down_smem, s, p, static_cast<const bf16*>(a), rows);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
