// Paged decode attention, all heads per CTA (the default below kMmaBulkMinSeqs decode sequences,
// or where mma_bulk's shape does not fit): a CTA owns (split, sequence) and every kv head and streams whole cache rows
// through a cp.async pipeline. The split plan and the combine of splits are in attention.cu.
#include <algorithm>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/kv_cache_codes.cuh"

namespace kvasir::cuda {
namespace {

// All-heads decode (default): a CTA owns (split, sequence) and every kv head, so it streams whole cache
// rows (kv_heads * head_dim contiguous values per token, whole blocks back to back) instead of one
// head's 256 bytes at a 2 KB stride. Tiles of kT tokens (K and V) go through a kStages-deep
// cp.async pipeline in shared memory, so two tiles are in flight while one is consumed. Warp w
// serves kv head w % KVH (warps w / KVH split that head's tokens); a row group of HD / 8 lanes
// scores one token against every query head of the group and keeps an online softmax per head,
// updated once per tile. Row groups are merged at the end, splits by decode_combine_kernel.
constexpr int kAllHeadsThreads = 256;
constexpr int kAllHeadsWarps = kAllHeadsThreads / 32;
constexpr int kAllHeadsStages = 3;

// C: the cache's element type (kv_cache_codes.cuh); tiles hold it as stored (FP8 codes are
// widened when read from shared memory), so an FP8 cache streams half the bytes.
template <typename C, int HD, int KVH>
struct AllHeadsShape {
  static constexpr int kLanes = HD / 8;                    // lanes per row group
  static constexpr int kRpw = 32 / kLanes;                 // row groups per warp
  static constexpr int kWph = kAllHeadsWarps / KVH;              // warps per kv head
  static constexpr int kRow = KVH * HD;                    // values per cache row (token)
  static constexpr int kRowBytes = kRow * static_cast<int>(sizeof(C));
  static constexpr int kByBytes = 16384 / kRowBytes;       // tokens in 16 KB of K
  static constexpr int kMinT = kWph * kRpw;                // one token per row group
  static constexpr int kT = kByBytes > 32 ? 32 : (kByBytes < kMinT ? kMinT : kByBytes);
  static constexpr int kPerRow = kT / kMinT;               // tokens per row group per tile
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(C));  // values per 16-byte chunk
  static constexpr int kChunks = kT * kRow / kChunkElems;  // 16-byte chunks per K (or V) tile
  static constexpr size_t kStageBytes = static_cast<size_t>(2) * kT * kRowBytes;
  static_assert(kAllHeadsWarps % KVH == 0 && kT % kMinT == 0, "all-heads decode shape");
};

template <typename C, int HD, int KVH, int GC>
size_t all_heads_smem_bytes() {
  using S = AllHeadsShape<C, HD, KVH>;
  const size_t pipe = kAllHeadsStages * S::kStageBytes;
  const size_t red = static_cast<size_t>(kAllHeadsWarps) * S::kRpw * GC * HD * sizeof(float);
  return std::max(pipe, red);
}

template <typename C, int HD, int KVH, int GC>
__global__ void __launch_bounds__(kAllHeadsThreads, GC >= 8 ? 1 : 2)
    decode_all_heads_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs, int num_decode, int num_splits,
                     int part_tokens, float* __restrict__ partial) {
  using S = AllHeadsShape<C, HD, KVH>;
  // Metadata and block tables are host-staged and the cache rows other than the newest token's
  // are older than this step: all of that is read (or pulled into L2) before waiting for the
  // previous kernel. Everything written, q, and the cp.async copies come after the wait.
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char all_heads_smem[];
  __shared__ float red_m[kAllHeadsWarps * S::kRpw][GC], red_l[kAllHeadsWarps * S::kRpw][GC];
  __shared__ int32_t blocks[kMaxPartition + 2];

  const int group = a.num_heads / KVH;  // <= GC
  const SplitKeys keys = split_keys(a, decode_seqs, part_tokens, blockIdx.x, blockIdx.y);
  if (finish_empty_split(a, keys, num_splits, HD, partial)) return;
  const KeyTiles tiles = stage_key_tiles<S::kT>(a, keys, blocks);
  const int64_t token = keys.token;
  const int begin = keys.begin, end = keys.end, bs = a.block_size;
  const int num_heads = a.num_heads;
  const int64_t part_stride = static_cast<int64_t>(num_decode) * num_heads * num_splits;
  const int t0 = tiles.t0, ntiles = tiles.ntiles, b_first = tiles.b_first;
  __syncthreads();

  const C* kc = static_cast<const C*>(a.k_cache);
  const C* vc = static_cast<const C*>(a.v_cache);
  {
    // The first tiles the pipeline will ask for, towards L2 (one 128-byte line per thread step).
    constexpr int kLinesPerRow = S::kRowBytes / 128 > 0 ? S::kRowBytes / 128 : 1;
    constexpr int kLineElems = 128 / static_cast<int>(sizeof(C));
    const int first = max(begin, t0), last = min(end, t0 + (kAllHeadsStages - 1) * S::kT);
    for (int c = threadIdx.x; c < (last - first) * kLinesPerRow; c += kAllHeadsThreads) {
      const int j = first + c / kLinesPerRow;
      const int64_t off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * S::kRow +
                          (c % kLinesPerRow) * kLineElems;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kc + off));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vc + off));
    }
  }
  pdl_wait();
  C* stage_base = reinterpret_cast<C*>(all_heads_smem);
  // Tiles start at multiples of kT; when the block size is a multiple of kT too, a tile's rows
  // are one contiguous run of the cache: one block lookup per tile, no division per chunk.
  const bool tile_in_block = bs % S::kT == 0;
  auto load_tile = [&](int tile) {
    C* ks = stage_base + static_cast<size_t>(tile % kAllHeadsStages) * 2 * S::kT * S::kRow;
    C* vs = ks + S::kT * S::kRow;
    const int tb = t0 + tile * S::kT;
    constexpr int kE = S::kChunkElems;
    constexpr int kChunksPerRow = S::kRow / kE;
    if (tile_in_block) {
      const int64_t base = (static_cast<int64_t>(blocks[tb / bs - b_first]) * bs + tb % bs) * S::kRow;
#pragma unroll 4
      for (int c = threadIdx.x; c < S::kChunks; c += kAllHeadsThreads) {
        const int j = tb + c / kChunksPerRow;
        const bool valid = j >= begin && j < end;
        const int64_t off = valid ? base + static_cast<int64_t>(c) * kE : 0;
        cp_async16(ks + c * kE, kc + off, valid);
        cp_async16(vs + c * kE, vc + off, valid);
      }
      return;
    }
    for (int c = threadIdx.x; c < S::kChunks; c += kAllHeadsThreads) {
      const int tt = c / kChunksPerRow, ch = c % kChunksPerRow;
      const int j = tb + tt;
      const bool valid = j >= begin && j < end;
      int64_t off = 0;
      if (valid) off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * S::kRow + ch * kE;
      cp_async16(ks + c * kE, kc + off, valid);
      cp_async16(vs + c * kE, vc + off, valid);
    }
  };
#pragma unroll
  for (int i = 0; i < kAllHeadsStages - 1; ++i) {
    if (i < ntiles) load_tile(i);
    cp_async_commit();
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kvh = warp % KVH, wsub = warp / KVH;
  const int rsub = lane / S::kLanes, li = lane % S::kLanes;
  const int row = wsub * S::kRpw + rsub;  // row group within the head: 0 .. kMinT-1
  const int d0 = li * 8;
  const int head0 = kvh * group;
  const bool capped = a.softcap > 0.0f;
  const float qscale = capped ? a.scale : a.scale * kLog2e;  // scores kept in log2 units
  const bf16* q = static_cast<const bf16*>(a.q);
  float qf[GC][8];
  load_group_queries<GC>(q + (token * num_heads + head0) * HD + d0, HD, group, qscale, qf);
  float m[GC], l[GC], acc[GC][8];
  init_online_softmax<GC>(m, l, acc);

  for (int i = 0; i < ntiles; ++i) {
    cp_async_wait<kAllHeadsStages - 2>();
    __syncthreads();  // tile i is in for every thread; tile i - 1's stage is free again
    if (i + kAllHeadsStages - 1 < ntiles) load_tile(i + kAllHeadsStages - 1);
    cp_async_commit();
    const C* ks = stage_base + static_cast<size_t>(i % kAllHeadsStages) * 2 * S::kT * S::kRow;
    const C* vs = ks + S::kT * S::kRow;
    const int tb = t0 + i * S::kT;
    float sc[S::kPerRow][GC];
#pragma unroll
    for (int k = 0; k < S::kPerRow; ++k) {
      const int tt = row + k * S::kMinT;
      const int j = tb + tt;
      const bool valid = j >= begin && j < end;
      float kf[8];
      load8(ks + tt * S::kRow + kvh * HD + d0, kf);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float d = row_group_dot<S::kLanes>(qf[g], kf);
        if (capped) d = a.softcap * tanhf(d / a.softcap) * kLog2e;
        sc[k][g] = valid ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      float mt = m[g];
#pragma unroll
      for (int k = 0; k < S::kPerRow; ++k) mt = fmaxf(mt, sc[k][g]);
      const float corr = mt == -INFINITY ? 1.0f : exp2f(m[g] - mt);
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
      m[g] = mt;
#pragma unroll
      for (int k = 0; k < S::kPerRow; ++k) {
        const float p = mt == -INFINITY ? 0.0f : exp2f(sc[k][g] - mt);
        sc[k][g] = p;
        l[g] += p;
      }
    }
#pragma unroll
    for (int k = 0; k < S::kPerRow; ++k) {
      const int tt = row + k * S::kMinT;
      float vf[8];
      load8(vs + tt * S::kRow + kvh * HD + d0, vf);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(sc[k][g], vf[e], acc[g][e]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the reduction buffer

  float* red_acc = reinterpret_cast<float*>(all_heads_smem);  // [warp * kRpw + rsub][GC][HD]
  const int rg = warp * S::kRpw + rsub;
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    if (li == 0) {
      red_m[rg][g] = m[g];
      red_l[rg][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) red_acc[(rg * GC + g) * HD + d0 + e] = acc[g][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < num_heads * HD; idx += blockDim.x) {
    const int h = idx / HD, d = idx % HD;
    const int hk = h / group, g = h % group;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < S::kWph; ++w) {
#pragma unroll
      for (int r = 0; r < S::kRpw; ++r) mx = fmaxf(mx, red_m[(w * KVH + hk) * S::kRpw + r][g]);
    }
    float sum = 0.0f, num = 0.0f;
#pragma unroll
    for (int w = 0; w < S::kWph; ++w) {
#pragma unroll
      for (int r = 0; r < S::kRpw; ++r) {
        const int rr = (w * KVH + hk) * S::kRpw + r;
        const float wt = red_m[rr][g] == -INFINITY ? 0.0f : exp2f(red_m[rr][g] - mx);
        sum += red_l[rr][g] * wt;
        num += red_acc[(rr * GC + g) * HD + d] * wt;
      }
    }
    const float v = sum > 0.0f ? num / sum : 0.0f;
    // natural-log units for the combine
    const float m_ln = mx == -INFINITY ? -INFINITY : mx * 0.6931471805599453f;
    store_split_result(a, keys, part_stride, num_splits, HD, h, d, v, m_ln, sum, partial);
  }
}

template <typename C, int HD, int KVH, int GC>
void launch_all_heads_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                 cudaStream_t s) {
  dim3 grid(sp.num_splits, nd);
  launch(decode_all_heads_kernel<C, HD, KVH, GC>, grid, kAllHeadsThreads, all_heads_smem_bytes<C, HD, KVH, GC>(), s, a, decode_seqs, nd,
         sp.num_splits, sp.partition_tokens, partial);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <typename C, int HD, int KVH>
void launch_all_heads_kvh(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                   cudaStream_t s) {
  const int group = a.num_heads / KVH;
  if (group <= 1) launch_all_heads_t<C, HD, KVH, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_all_heads_t<C, HD, KVH, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_all_heads_t<C, HD, KVH, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_all_heads_t<C, HD, KVH, 8>(a, decode_seqs, nd, sp, partial, s);
}

template <typename C, int HD>
void launch_all_heads_hd(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                  cudaStream_t s) {
  switch (a.num_kv_heads) {
    case 1: launch_all_heads_kvh<C, HD, 1>(a, decode_seqs, nd, sp, partial, s); break;
    case 2: launch_all_heads_kvh<C, HD, 2>(a, decode_seqs, nd, sp, partial, s); break;
    case 4: launch_all_heads_kvh<C, HD, 4>(a, decode_seqs, nd, sp, partial, s); break;
    default: launch_all_heads_kvh<C, HD, 8>(a, decode_seqs, nd, sp, partial, s); break;
  }
}

template <typename C, int HD, int KVH, int GC>
void init_all_heads_t() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(decode_all_heads_kernel<C, HD, KVH, GC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(all_heads_smem_bytes<C, HD, KVH, GC>())));
}
template <typename C, int HD, int KVH>
void init_all_heads_kvh() {
  init_all_heads_t<C, HD, KVH, 1>();
  init_all_heads_t<C, HD, KVH, 2>();
  init_all_heads_t<C, HD, KVH, 4>();
  init_all_heads_t<C, HD, KVH, 8>();
}
template <typename C, int HD>
void init_all_heads_hd() {
  init_all_heads_kvh<C, HD, 1>();
  init_all_heads_kvh<C, HD, 2>();
  init_all_heads_kvh<C, HD, 4>();
  init_all_heads_kvh<C, HD, 8>();
}

template <typename C>
void launch_all_heads_codes(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                            float* partial, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: launch_all_heads_hd<C, 64>(a, decode_seqs, nd, sp, partial, s); break;
    case 128: launch_all_heads_hd<C, 128>(a, decode_seqs, nd, sp, partial, s); break;
    default: launch_all_heads_hd<C, 256>(a, decode_seqs, nd, sp, partial, s); break;
  }
}

template <typename C>
void init_all_heads_codes() {
  init_all_heads_hd<C, 64>();
  init_all_heads_hd<C, 128>();
  init_all_heads_hd<C, 256>();
}

}  // namespace

void launch_decode_all_heads(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s) {
  with_cache_codes(a.kv_cache, [&]<typename C>() { launch_all_heads_codes<C>(a, decode_seqs, nd, sp, partial, s); });
}

void init_decode_all_heads_kernels() {
  init_all_heads_codes<bf16>();
  init_all_heads_codes<e4m3>();
  init_all_heads_codes<e5m2>();
}

}  // namespace kvasir::cuda
