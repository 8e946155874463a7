// The router GEMV and moe_route in one launch, for decode-sized batches (cuda_moe_ops.cpp folds a
// router linear into the moe_route op after it). Apart, they were two dependent launches of a
// batch-1 MoE layer's chain (router GEMV ~3 us, route ~6.7 us on an H200, BENCHMARKS.md
// 2026-12-02), each waiting for the one before it.
// One cluster of up to 8 CTAs: every warp of the cluster takes whole router rows (expert e =
// warp, warp + warps, ...), streams the row once (16-byte loads, the first round issued before the
// PDL wait: weights are never written by an earlier kernel), dots it with every token's x (L1),
// and writes the logit both to the op's logits tensor (still written, as the unfused linear
// would) and into CTA 0's shared memory through distributed shared memory. After the cluster
// barrier, CTA 0's warps route one token each with route_token (moe_route.cuh), the very code
// of moe_route_kernel, so the routing of given logits is the same to the bit.
#include <cooperative_groups.h>

#include "backend/cuda/moe_route.cuh"

namespace kvasir::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kLoads = 8;                      // 16-byte loads in flight per lane
constexpr int64_t kRound = 32 * 8 * kLoads;    // columns a warp reads per round
constexpr int kMaxCluster = 8;                 // the portable cluster size
constexpr int64_t kBytesPerCta = 64 << 10;     // router bytes a CTA should stream, for the cluster size
constexpr size_t kSmemLimit = 48 << 10;        // no opt-in needed below this

__host__ __device__ inline int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }

// A CTA may write a peer's shared memory only once the peer runs: every thread arrives at a
// cluster barrier on entry and waits on it just before the first remote write, so the wait
// overlaps the first round of weight loads.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

int cluster_size(int num_experts, int64_t in_features) {
  const int64_t bytes = static_cast<int64_t>(num_experts) * in_features * 2;
  const int64_t c = (bytes + kBytesPerCta - 1) / kBytesPerCta;
  return static_cast<int>(c < 1 ? 1 : c > kMaxCluster ? kMaxCluster : c);
}

size_t smem_bytes(int num_tokens, int num_experts, int num_groups, int top_k) {
  const int route_warps = num_tokens < kWarps ? num_tokens : kWarps;
  return static_cast<size_t>(align16(int64_t{num_tokens} * num_experts * 4)) +
         static_cast<size_t>(route_warps) * static_cast<size_t>(route_scratch_bytes(num_experts, num_groups, top_k));
}

// A round of row wr from column c0: lane's 16-byte pieces at c0 + (u * 32 + lane) * 8 (zero past k).
__device__ __forceinline__ void load_round(const bf16* wr, int64_t k, int64_t c0, int lane, uint4 (&w)[kLoads]) {
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int64_t c = c0 + (static_cast<int64_t>(u) * 32 + lane) * 8;
    w[u] = c < k ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
  }
}

__global__ void __launch_bounds__(kThreads) moe_router_route_kernel(MoeRouterArgs r, MoeRouteArgs a) {
  extern __shared__ __align__(16) unsigned char router_smem[];
  float* logits_s = reinterpret_cast<float*>(router_smem);  // [num_tokens, num_experts], read on CTA 0
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), csize = static_cast<int>(cluster.num_blocks());
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int E = a.num_experts, T = a.num_tokens;
  const int64_t K = r.in_features;
  const int stride = csize * kWarps;
  const auto* w = static_cast<const bf16*>(r.w);
  const auto* x = static_cast<const bf16*>(r.x);
  float* dst = csize > 1 ? cluster.map_shared_rank(logits_s, 0) : logits_s;

  if (csize > 1) cluster_arrive_relaxed();
  int e = rank * kWarps + warp;
  uint4 next[kLoads];
  if (e < E) load_round(w + static_cast<int64_t>(e) * K, K, 0, lane, next);
  pdl_launch_dependents();
  pdl_wait();
  if (csize > 1) cluster_wait();
  for (; e < E; e += stride) {
    float acc[kMoeRouterMaxTokens];
#pragma unroll
    for (int t = 0; t < kMoeRouterMaxTokens; ++t) acc[t] = 0.0f;
    for (int64_t c0 = 0; c0 < K; c0 += kRound) {
      uint4 cur[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) cur[u] = next[u];
      // The next round: this row's, else the warp's next row's first.
      const int64_t nc = c0 + kRound < K ? c0 + kRound : 0;
      const int ne = nc != 0 ? e : e + stride;
      if (ne < E) load_round(w + static_cast<int64_t>(ne) * K, K, nc, lane, next);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t c = c0 + (static_cast<int64_t>(u) * 32 + lane) * 8;
        if (c >= K) break;
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
    const float b = r.bias != nullptr ? r.bias[e] : 0.0f;
#pragma unroll
    for (int t = 0; t < kMoeRouterMaxTokens; ++t) {
      if (t >= T) break;
      const float v = warp_sum(acc[t]) + b;
      if (lane == 0) {
        r.logits[static_cast<int64_t>(t) * E + e] = v;
        dst[t * E + e] = v;
      }
    }
  }
  // Release / acquire over the cluster: CTA 0 sees every CTA's logits in its shared memory.
  if (csize > 1) cluster.sync();
  else __syncthreads();
  if (rank != 0 || warp >= T) return;
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
                       aligned16(r.x) && aligned16(r.w),
                   "moe_router_route: unsupported shape or alignment");
  const int c = cluster_size(a.num_experts, r.in_features);
  launch_clustered(moe_router_route_kernel, dim3(static_cast<unsigned>(c)), dim3(kThreads), dim3(c, 1, 1),
                   smem_bytes(a.num_tokens, a.num_experts, a.num_groups, a.top_k), s, r, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
