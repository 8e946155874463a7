// The router GEMV and moe_route in one launch, for decode-sized batches (cuda_moe_ops.cpp folds a
// router linear into the moe_route op after it). Apart, they were two dependent launches of every
// MoE layer's chain (router GEMV ~3 us, route ~6.7 us on an H200, BENCHMARKS.md 2026-12-02).
// Small CTAs, as the GEMV's: S warps per router row (S from the row count, so a few long rows
// still spread over many SMs), each streaming its share of the row once with 16-byte loads, the
// first round issued before the PDL wait (weights are never written by an earlier kernel; a CTA
// this small is placed beside the previous kernel's, so that round overlaps it); the warps' dots
// with every token's x meet in shared memory and the logits go to the op's tensor (still written,
// as the unfused linear would). The last CTA to finish (a ticket counter, reset by that CTA for
// the next launch) reads them back and routes with route_token (moe_route.cuh), the very code of
// moe_route_kernel, so the routing of given logits is the same to the bit. (A first version ran
// one cluster of 8 CTAs of 512 threads merging through distributed shared memory: a CTA that size
// fits an SM only alone, so it started after the previous kernel ended, and the batch-1
// Qwen3-30B-A3B step got 3% slower than the two launches it replaced: H100, 2026-12-07.)
#include "backend/cuda/moe_route.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kLoads = 8;                    // 16-byte loads in flight per lane
constexpr int64_t kRound = 32 * 8 * kLoads;  // columns a warp reads per round
constexpr int kTargetWarps = 256;            // warps the rows should keep busy, for S
constexpr size_t kSmemLimit = 48 << 10;      // no opt-in needed below this

__host__ __device__ inline int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }

// Warps per router row: 1, 2 or 4, more where the rows are few.
int warps_per_row(int num_experts) {
  if (num_experts * 4 <= kTargetWarps) return 4;
  if (num_experts * 2 <= kTargetWarps) return 2;
  return 1;
}

// Shared memory of every CTA: the logits (the last CTA copies them there) and one routing scratch
// per warp that routes.
size_t smem_bytes(int num_tokens, int num_experts, int num_groups, int top_k) {
  const int route_warps = num_tokens < kWarps ? num_tokens : kWarps;
  return static_cast<size_t>(align16(int64_t{num_tokens} * num_experts * 4)) +
         static_cast<size_t>(route_warps) * static_cast<size_t>(route_scratch_bytes(num_experts, num_groups, top_k));
}

// A round of row wr in [c0, end): lane's 16-byte pieces at c0 + (u * 32 + lane) * 8 (zero past end).
__device__ __forceinline__ void load_round(const bf16* wr, int64_t end, int64_t c0, int lane, uint4 (&w)[kLoads]) {
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int64_t c = c0 + (static_cast<int64_t>(u) * 32 + lane) * 8;
    w[u] = c < end ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
  }
}

template <int S>
__global__ void __launch_bounds__(kThreads) moe_router_route_kernel(MoeRouterArgs r, MoeRouteArgs a) {
  extern __shared__ __align__(16) unsigned char router_smem[];
  __shared__ float part[kWarps][kMoeRouterMaxTokens];
  __shared__ bool last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int E = a.num_experts, T = a.num_tokens;
  const int64_t K = r.in_features;
  const int e = blockIdx.x * (kWarps / S) + warp / S;
  // This warp's columns [kb, ke): whole 8-column pieces, S parts of the row.
  const int64_t per = (K / 8 + S - 1) / S * 8;
  const int64_t kb = (warp % S) * per, ke = kb + per < K ? kb + per : K;
  const bool live = e < E && kb < ke;
  const bf16* wr = static_cast<const bf16*>(r.w) + static_cast<int64_t>(e < E ? e : 0) * K;
  const auto* x = static_cast<const bf16*>(r.x);

  uint4 next[kLoads];
  if (live) load_round(wr, ke, kb, lane, next);
  pdl_launch_dependents();
  pdl_wait();
  float acc[kMoeRouterMaxTokens];
#pragma unroll
  for (int t = 0; t < kMoeRouterMaxTokens; ++t) acc[t] = 0.0f;
  if (live) {
    for (int64_t c0 = kb; c0 < ke; c0 += kRound) {
      uint4 cur[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) cur[u] = next[u];
      if (c0 + kRound < ke) load_round(wr, ke, c0 + kRound, lane, next);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t c = c0 + (static_cast<int64_t>(u) * 32 + lane) * 8;
        if (c >= ke) break;
        float wf[8];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&cur[u]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(h[i]);
          wf[2 * i] = f.x;
          wf[2 * i + 1] = f.y;
        }
#pragma unroll
        for (int t = 0; t < kMoeRouterMaxTokens; ++t) {
          if (t >= T) break;
          float xf[8];
          load8(x + t * K + c, xf);
          float s = acc[t];
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(wf[i], xf[i], s);
          acc[t] = s;
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMoeRouterMaxTokens; ++t) {
    if (t >= T) break;
    const float v = warp_sum(acc[t]);
    if (lane == 0) part[warp][t] = v;
  }
  __syncthreads();
  if (warp % S == 0 && e < E) {
    for (int t = lane; t < T; t += 32) {
      float v = 0.0f;
#pragma unroll
      for (int p = 0; p < S; ++p) v += part[warp + p][t];  // in part order: deterministic
      if (r.bias != nullptr) v += r.bias[e];
      r.logits[static_cast<int64_t>(t) * E + e] = v;
    }
  }
  // Ticket: the last CTA to arrive routes. The fence publishes this CTA's logits before its
  // arrival; the last CTA's fence orders its reads after every arrival.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(r.ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  float* logits_s = reinterpret_cast<float*>(router_smem);
  for (int i = threadIdx.x; i < T * E; i += kThreads) logits_s[i] = __ldcg(r.logits + i);  // past L1: other CTAs wrote them
  if (threadIdx.x == 0) *r.ticket = 0u;  // every CTA of this launch has arrived: ready for the next
  __syncthreads();
  if (warp >= T) return;
  MoeRouteArgs ra = a;
  ra.logits = logits_s;
  unsigned char* scratch = router_smem + align16(int64_t{T} * E * 4) +
                           static_cast<int64_t>(warp) * route_scratch_bytes(E, a.num_groups, a.top_k);
  for (int t = warp; t < T; t += kWarps) store_route(ra, t, route_token(ra, t, scratch, lane), lane);
}

}  // namespace

bool moe_router_route_supported(int num_tokens, int num_experts, int num_groups, int top_k, int64_t in_features) {
  return num_tokens >= 1 && num_tokens <= kMoeRouterMaxTokens && num_experts >= 1 &&
         num_experts <= kMoeRouteMaxExperts && num_groups >= 1 && num_experts % num_groups == 0 && top_k >= 1 &&
         top_k <= num_experts && in_features >= 8 && in_features % 8 == 0 &&
         smem_bytes(num_tokens, num_experts, num_groups, top_k) <= kSmemLimit;
}

void launch_moe_router_route(const MoeRouterArgs& r, const MoeRouteArgs& a, cudaStream_t s) {
  KVASIR_CHECK_MSG(moe_router_route_supported(a.num_tokens, a.num_experts, a.num_groups, a.top_k, r.in_features) &&
                       aligned16(r.x) && aligned16(r.w) && r.ticket != nullptr,
                   "moe_router_route: unsupported shape or alignment");
  const int S = warps_per_row(a.num_experts);
  const unsigned blocks = static_cast<unsigned>((a.num_experts + kWarps / S - 1) / (kWarps / S));
  const size_t smem = smem_bytes(a.num_tokens, a.num_experts, a.num_groups, a.top_k);
  if (S == 4) launch(moe_router_route_kernel<4>, blocks, kThreads, smem, s, r, a);
  else if (S == 2) launch(moe_router_route_kernel<2>, blocks, kThreads, smem, s, r, a);
  else launch(moe_router_route_kernel<1>, blocks, kThreads, smem, s, r, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
