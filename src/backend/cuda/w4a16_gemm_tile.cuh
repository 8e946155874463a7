// What the W4A16 GEMM kernels share (w4a16_gemm.cu: mma.sync; w4a16_wgmma.cu: wgmma): the
// launch's arguments, a tile's projection, the output store and the split-K sum across a cluster.
// Header-only device code; must not hold kernels.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/w4a16_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {

constexpr int kBM = 64, kBN = 128, kThreads = 256;  // a tile: 64 tokens x 128 output features
constexpr int kMaxSplits = 8;        // the portable cluster size
constexpr int kRedStride = kBN + 8;  // float32 row stride of the split tile in shared memory (bank spread)

struct W4a16GemmArgs {
  const bf16* x;
  W4a16Projection p[kW4a16MaxProjections];
  int32_t tile_end[kW4a16MaxProjections];  // column tiles of projections 0..i together
  int32_t num_proj;
  int64_t rows, k;
  W4a16Groups groups;  // 32-column half -> its group, without a division (one group size for all)
  int32_t kc_per_split, f32_out;
};

// The stream-K kernel's view of the workspace (W4a16StreamWorkspace): one ticket a tile, two
// float32 partial tiles a CTA; tiles = column tiles x row tiles, in row-tile-major order.
struct W4a16StreamSplit {
  float* partials;
  int32_t* tickets;
  int32_t tiles, column_tiles, pairs_per_tile;
};

// The launch's arguments for column tiles `bn` features wide (tile_end counted in them); the
// splits (kc_per_split) are the kernel's to set. *tiles: column tiles of every projection.
W4a16GemmArgs w4a16_gemm_args(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k,
                              Elem out, int bn, int64_t* tiles);

// How many K slices (cluster CTAs) for `tiles` output tiles of `chunks` 64-column chunks, with
// ctas_per_sm CTAs resident per SM: the count (up to the cluster limit, each slice at least four
// chunks) whose CTAs fill the SMs most evenly, the fewest among those within 3% of the best (a
// slice costs a pipeline fill and its share of the reduction). clusters[s], where given and
// positive, is how many clusters of s CTAs the GPU holds at once (a GPC holds whole clusters, so
// it is not the SMs over s): a wave is that many tiles.
int w4a16_splits_for(int64_t tiles, int64_t chunks, int num_sms, int ctas_per_sm, const int* clusters = nullptr);

// The grid (column tiles, row tiles of kBM tokens, K slices) of a launch whose arguments cover
// `tiles` column tiles, with a.kc_per_split set for `splits` slices; even_slices rounds a slice
// up to an even chunk count where the last slice stays non-empty.
dim3 w4a16_gemm_grid(W4a16GemmArgs& a, int64_t tiles, int splits, bool even_slices);

// The projection of column tile `tile` (kTileN features wide) and its first output column.
// Selected field by field under predicates: indexing the parameter array at run time would copy
// it to local memory.
template <int kTileN = kBN>
__device__ __forceinline__ W4a16Projection tile_projection(const W4a16GemmArgs& a, int tile, int64_t* n0) {
  W4a16Projection p = a.p[0];
  int first = 0;
  if (a.num_proj > 1 && tile >= a.tile_end[0]) {
    p = a.p[1];
    first = a.tile_end[0];
  }
  if (a.num_proj > 2 && tile >= a.tile_end[1]) {
    p = a.p[2];
    first = a.tile_end[1];
  }
  *n0 = static_cast<int64_t>(tile - first) * kTileN;
  return p;
}

// Where a CTA of either kernel works (grid: column tiles of every projection, row tiles of kBM
// tokens, K slices): its projection, first output feature n0 and token m0, and its slice
// [kb, ke) of K's 64-column chunks.
struct TileWork {
  W4a16Projection p;
  int64_t n0, m0;
  int chunks, kb, ke;
};
__device__ __forceinline__ TileWork tile_work(const W4a16GemmArgs& a) {
  TileWork w;
  w.p = tile_projection(a, static_cast<int>(blockIdx.x), &w.n0);
  w.m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  w.chunks = static_cast<int>(a.k / 64);
  w.kb = static_cast<int>(blockIdx.z) * a.kc_per_split;
  w.ke = min(w.chunks, w.kb + a.kc_per_split);
  return w;
}

// A pipeline stage of either kernel: one 64-column chunk of K for the tile, at these offsets:
// activations (64 tokens x 64 bf16, 128-byte rows with their 16-byte pieces XOR-swizzled by row
// % 8: ldmatrix without bank conflicts, and wgmma's 128-byte swizzle), codes (eight 512-byte
// layout tiles), two group rows of scales (up to float32) and of zero points.
constexpr int kABytes = kBM * 64 * 2;
constexpr int kBBytes = (kBN / 16) * 512;
constexpr int kSBytes = 2 * kBN * 4;  // two group rows, up to float32
constexpr int kZBytes = 2 * kBN;
constexpr int kStageUsedBytes = kABytes + kBBytes + kSBytes + kZBytes;

// What one thread copies into every stage, its 64-bit address math done once before the loop
// (done per stage, it was most of the loop's instructions): two 16-byte pieces of activations
// (rows tid / 8 and tid / 8 + 32, piece tid % 8; rows past the batch are zero-filled), one of codes
// (n16 tile tid / 32, lane tid % 32), and for warps 0-1 a piece of scales (group row `slot` =
// warp, piece lane) or for warp 2 a piece of zero points (row lane / 8, piece lane % 8).
struct StageCopies {
  const uint8_t* a_src;   // activation row tid / 8 at chunk 0 (row 0 when past the batch)
  int64_t a_second;       // bytes from that row to row + 32 (0 when row + 32 is past the batch)
  const uint8_t* b_src;   // codes at chunk 0
  const uint8_t* s_src;   // scales / zeros of group 0
  int64_t s_group;        // bytes per group row
  uint32_t a_dst, s_dst;  // offsets in a stage
  int32_t s_slot;         // group row 0 or 1; -1: no scale or zero piece
  bool a_ok0, a_ok1, b_ok, s_ok;
};

// A thread's two 16-byte activation pieces of every stage, into either kernel's copy plan (its
// fields a_src, a_second, a_dst, a_ok0, a_ok1): rows tid / 8 and tid / 8 + 32 of the row tile at
// chunk 0, piece tid % 8, rows past the batch zero-filled; the destination is XOR-swizzled by
// row % 8 (row + 32: the same swizzle, 32 * 128 bytes on).
template <typename Copies>
__device__ __forceinline__ void plan_activation_copies(Copies& c, const W4a16GemmArgs& a, int64_t m0, int tid) {
  const int r = tid >> 3, piece = tid & 7;
  c.a_ok0 = m0 + r < a.rows;
  c.a_ok1 = m0 + r + 32 < a.rows;
  c.a_src = reinterpret_cast<const uint8_t*>(a.x + (c.a_ok0 ? m0 + r : 0) * a.k + piece * 8);
  c.a_second = c.a_ok1 ? 32 * a.k * 2 : 0;
  c.a_dst = static_cast<uint32_t>(r * 128 + ((piece ^ (r & 7)) << 4));
}

template <int kType>
__device__ __forceinline__ StageCopies stage_copies(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t m0,
                                                    int64_t n0, int tid) {
  constexpr int sb = kType == kW4a16ScaleF32 ? 4 : 2;
  StageCopies c;
  const int64_t K = a.k, N = p.out_features, chunks = K / 64;
  plan_activation_copies(c, a, m0, tid);
  const int64_t nt = n0 / 16 + (tid >> 5);
  c.b_ok = nt < N / 16;
  c.b_src = static_cast<const uint8_t*>(p.codes) + (c.b_ok ? nt : 0) * chunks * 512 + (tid & 31) * 16;
  const int warp = tid >> 5, lane = tid & 31;
  c.s_slot = -1;
  c.s_ok = false;
  c.s_src = nullptr;
  c.s_group = 0;
  c.s_dst = 0;
  if (warp < 2 && lane < kBN * sb / 16) {
    const int64_t col = n0 + lane * 16 / sb;
    c.s_slot = warp;
    c.s_ok = col < N;
    c.s_src = static_cast<const uint8_t*>(p.scales) + (c.s_ok ? col : 0) * sb;
    c.s_group = N * sb;
    c.s_dst = static_cast<uint32_t>(kABytes + kBBytes + warp * kBN * 4 + lane * 16);
  } else if (warp == 2 && lane < 2 * (kBN / 16) && p.zeros != nullptr) {
    const int slot = lane / (kBN / 16);
    const int64_t col = n0 + (lane % (kBN / 16)) * 16;
    c.s_slot = slot;
    c.s_ok = col < N;
    c.s_src = p.zeros + (c.s_ok ? col : 0);
    c.s_group = N;
    c.s_dst = static_cast<uint32_t>(kABytes + kBBytes + kSBytes + slot * kBN + (lane % (kBN / 16)) * 16);
  }
  return c;
}

// Chunk kc (64 columns of K) into stage `st`: each group row is copied only when the chunk
// needs it (row 1 only when the chunk's halves lie in two groups).
__device__ __forceinline__ void load_stage(uint8_t* st, const StageCopies& c, const W4a16Groups& groups, int kc) {
  cp_async16(st + c.a_dst, c.a_src + kc * 128, c.a_ok0);
  cp_async16(st + c.a_dst + 32 * 128, c.a_src + c.a_second + kc * 128, c.a_ok1);
  cp_async16(st + kABytes + threadIdx.x * 16, c.b_src + static_cast<int64_t>(kc) * 512, c.b_ok);
  if (c.s_slot >= 0) {
    const uint32_t g0 = w4a16_group_of(2 * static_cast<uint32_t>(kc), groups.magic);
    const uint32_t g1 = groups.split_chunks ? w4a16_group_of(2 * static_cast<uint32_t>(kc) + 1, groups.magic) : g0;
    if (c.s_slot == 0 || g1 != g0) cp_async16(st + c.s_dst, c.s_src + (c.s_slot ? g1 : g0) * c.s_group, c.s_ok);
  }
}

// Output columns col, col + 1 of `row`, bias added.
__device__ __forceinline__ void store_pair(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t row, int64_t col,
                                           float v0, float v1) {
  const int64_t N = p.out_features;
  if (p.bias != nullptr) {
    v0 += p.bias[col];
    v1 += p.bias[col + 1];
  }
  if (a.f32_out) *reinterpret_cast<float2*>(static_cast<float*>(p.y) + row * N + col) = make_float2(v0, v1);
  else *reinterpret_cast<uint32_t*>(static_cast<bf16*>(p.y) + row * N + col) = pack_bf16(v0, v1);
}

// Split K: every CTA (kCtaThreads threads) of the cluster has left its float32 tile (kTileM tokens x kTileN features)
// in its shared memory (`red`, rows kTileN + 8 floats apart: [token][feature]); the cluster waits
// for all of them, and rank r adds every rank's copy of float4 units r, r + S, ... (rows that
// exist only) in rank order and writes them. The second cluster barrier keeps each CTA's shared
// memory alive until every peer has read it.
template <int kTileM = kBM, int kTileN = kBN, int kCtaThreads = kThreads>
__device__ __forceinline__ void sum_split_tiles(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t m0,
                                                int64_t n0, float* red) {
  constexpr int kStride = kTileN + 8;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int splits = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int64_t N = p.out_features;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kTileM), a.rows - m0));
  for (int i = rank * kCtaThreads + static_cast<int>(threadIdx.x); i < rows * (kTileN / 4);
       i += splits * kCtaThreads) {
    const int row = i / (kTileN / 4), col = (i % (kTileN / 4)) * 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int r = 0; r < splits; ++r) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, r) + row * kStride + col);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    if (n0 + col < N) {
      store_pair(a, p, m0 + row, n0 + col, sum.x, sum.y);
      store_pair(a, p, m0 + row, n0 + col + 2, sum.z, sum.w);
    }
  }
  cluster.sync();
}

// The GEMM by wgmma (w4a16_wgmma.cu): its own tiles (64 tokens x 256 features), splits and grid.
// Only on a 9.0 device (wgmma_device()).
bool wgmma_device();
// ws (may be null): where the stream-K kernel sums tiles cut between CTAs; without it, or with
// KVASIR_W4A16_WGMMA_STREAM=0, K is split across cluster CTAs.
void launch_w4a16_wgmma(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k, Elem out,
                        int num_sms, const W4a16StreamWorkspace* ws, cudaStream_t s);
int w4a16_wgmma_splits(int64_t n, int64_t m, int64_t k, int num_sms);
// Whether the wgmma kernel takes these projections (all with zero points, or none).
bool w4a16_wgmma_takes(const W4a16Projection* proj, int num_proj);

}  // namespace kvasir::cuda
