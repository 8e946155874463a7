// The W4A16 wgmma GEMM's stream-K kernel (from two row tiles of tokens: w4a16_wgmma.cu chooses),
// on the main loop of w4a16_wgmma_mainloop.cuh, and the size of its workspace.
#include "backend/cuda/w4a16_kernels.h"
#include "backend/cuda/w4a16_stream_share.h"
#include "backend/cuda/w4a16_wgmma_mainloop.cuh"

namespace kvasir::cuda {
namespace {

// Stream-K: the work of every tile (column tile x row tile) is cut into pairs of chunks, and CTA
// g of G (one an SM) takes pairs [g U / G, (g + 1) U / G) of all U, in tile order: so every SM
// works, where whole tiles or cluster slices leave some idle (at batch 64 on an H100, 20-36 of 132:
// q/k/v 96 CTAs, o and down 96, gate/up 112; ncu, 2026-12-07). It pays where a tile is shared by
// few CTAs: at batch 128 (two row tiles) the step took 8.51 ms against 9.56 with cluster splits,
// at batch 64 (a tile over five or more CTAs) 5.84 against 5.01, so it starts at two row tiles. A tile a CTA covers whole is stored;
// a tile cut between CTAs is summed through the workspace: each covering CTA writes its float32
// partial (slot 0 for its first tile, 1 for its last), takes a ticket, and the last to arrive adds
// the partials in CTA order (deterministic, whoever arrives last), stores, and resets the ticket
// for the next launch. No CTA waits for another.
template <int kType, bool kZeros, int kAhead>
__global__ void __launch_bounds__(kWgThreads, 1) w4a16_wgmma_stream_kernel(W4a16GemmArgs a, W4a16StreamSplit sk) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x;
  const int cta = static_cast<int>(blockIdx.x), chunks = static_cast<int>(a.k / 64);
  const W4a16StreamShare share{static_cast<int64_t>(sk.tiles) * sk.pairs_per_tile, static_cast<int>(gridDim.x),
                               sk.pairs_per_tile};
  const int u0 = share.start(cta), u1 = share.start(cta + 1);
  float acc[32];
  pdl_launch_dependents();
  for (int u = u0; u < u1;) {
    const W4a16StreamPiece piece = share.piece(u, u1);
    const int tile = piece.tile;
    int64_t n0 = 0;
    const W4a16Projection p = tile_projection<kWgBN>(a, tile % sk.column_tiles, &n0);
    const int64_t m0 = static_cast<int64_t>(tile / sk.column_tiles) * kBM;
    if (u != u0) __syncthreads();  // the last tile's stages (and ticket flag) are read by all
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
    tile_mainloop<kType, kZeros, kAhead>(a, p, m0, n0, 2 * piece.p0, min(chunks, 2 * piece.p1), 2 * piece.p1, smem,
                                         acc);
    u = piece.next;
    if (share.whole(piece)) {
      store_tile(a, p, m0, n0, acc);
      continue;
    }
    // A partial tile is 8 x 512 float4s, float4 i of thread tid at i * 512 + tid: every warp's
    // stores and loads are 512 contiguous bytes. (Each thread's 32 accumulators side by side cost
    // 57-61% of the q/k/v and o launches' stall samples, ncu 2026-12-07, with a fence per thread.)
    auto partial = [&](int c, int slot) {
      return reinterpret_cast<float4*>(sk.partials) + (static_cast<int64_t>(c) * 2 + slot) * 8 * kWgThreads + tid;
    };
    float4* mine = partial(cta, share.slot(cta, tile));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      __stcg(mine + i * kWgThreads, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    }
    // Release: the barrier orders the CTA's stores before thread 0's fence, which (cumulative)
    // makes them visible GPU-wide before its ticket; acquire: the last arriver's fence after its
    // ticket, then the barrier, order every thread's loads after the other CTAs' stores.
    __syncthreads();  // every warpgroup is done with the stages and has written its partial
    const int lo = share.first_cta(tile), hi = share.last_cta(tile);
    volatile int* flag = reinterpret_cast<volatile int*>(smem);
    if (tid == 0) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      const int last = atomicAdd(sk.tickets + tile, 1) == hi - lo;
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      *flag = last;
    }
    __syncthreads();
    if (*flag == 0) continue;
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
    for (int c = lo; c <= hi; ++c) {
      const float4* src = partial(c, share.slot(c, tile));
      float4 q[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) q[i] = __ldcg(src + i * kWgThreads);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[4 * i] += q[i].x;
        acc[4 * i + 1] += q[i].y;
        acc[4 * i + 2] += q[i].z;
        acc[4 * i + 3] += q[i].w;
      }
    }
    store_tile(a, p, m0, n0, acc);
    if (tid == 0) sk.tickets[tile] = 0;
  }
}

}  // namespace

void launch_w4a16_wgmma_stream(const W4a16GemmArgs& a, const W4a16StreamSplit& sk, int ctas, cudaStream_t s) {
  with_wgmma_variant(a, [&]<int kType, bool kZeros, int kAhead>() {
    constexpr size_t smem = wg_smem(kAhead);
    auto kernel = w4a16_wgmma_stream_kernel<kType, kZeros, kAhead>;
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch(kernel, dim3(static_cast<unsigned>(ctas)), kWgThreads, smem, s, a, sk);
  });
}

size_t w4a16_stream_workspace_bytes(int max_ctas) {
  return kW4a16StreamTickets * sizeof(int32_t) + static_cast<size_t>(max_ctas) * 2 * kWgThreads * 32 * sizeof(float);
}

}  // namespace kvasir::cuda
