// Paged attention for decode over the block-table KV cache ([num_blocks, block_size, kv_heads,
// head_dim]): split-KV flash-decoding. A CTA owns (split, kv head, sequence) and every query head
// of its GQA group, so each key and value is read once per group; partial results are merged by a
// second kernel. Launch shapes never depend on sequence lengths (graph replay stays valid as
// sequences grow). The prefill / mixed kernel is in attention_prefill.cu.
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

// The GQA group's query rows (ng of GC live; the rest zero), pre-scaled, 8 dims per lane: shared
// by the decode kernels so they agree on what a query looks like.
template <int GC>
__device__ __forceinline__ void load_group_queries(const bf16* q_row, int head_dim, int ng, float scale,
                                                   float (&qf)[GC][8]) {
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    if (g < ng) {
      load8(q_row + g * head_dim, qf[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[g][e] *= scale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[g][e] = 0.0f;
    }
  }
}

// Online-softmax state of the group: running max, running sum, output accumulator.
template <int GC>
__device__ __forceinline__ void init_online_softmax(float (&m)[GC], float (&l)[GC], float (&acc)[GC][8]) {
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
}

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kMaxPartition = 512;
constexpr int kUnroll = 4;  // keys per row group in flight in the decode kernel

// ---------------------------------------------------------------------------------------------
// Decode. Lanes of a "row group" (head_dim / 8 lanes, 8 dims each) share one key; a warp works on
// 32 / lanes keys at once.
template <int HD, int GC>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs,
                                                               int num_chunks, int num_splits, int part_tokens,
                                                               float* __restrict__ partial) {
  pdl_begin();
  constexpr int kLanes = HD / 8;
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kRows = kDecodeWarps * kRowsPerWarp;
  extern __shared__ float smem[];
  __shared__ float stat_m[GC], stat_l[GC];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / num_chunks, chunk = blockIdx.y % num_chunks;
  const int di = blockIdx.z;
  const int s = decode_seqs != nullptr ? decode_seqs[di] : di;
  const int group = a.num_heads / a.num_kv_heads;
  const int g0 = chunk * GC;
  const int ng = min(GC, group - g0);
  const int head0 = kvh * group + g0;
  const int64_t token = a.query_start_loc[s];
  const int seq_len = a.seq_lens[s];
  const int pos = seq_len - 1;
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int begin = max(lo, split * part_tokens);
  const int end = min(seq_len, (split + 1) * part_tokens);
  const int nt = end - begin;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rsub = lane / kLanes, li = lane % kLanes;
  const int row_id = warp * kRowsPerWarp + rsub;
  const int d0 = li * 8;
  const int num_heads = a.num_heads;
  const int64_t part_base = (static_cast<int64_t>(di) * num_heads + head0) * num_splits + split;

  if (nt <= 0) {
    if (num_splits > 1) {
      for (int g = threadIdx.x; g < ng; g += blockDim.x) {
        partial[part_base + static_cast<int64_t>(g) * num_splits] = -INFINITY;  // m
      }
    } else {
      bf16* o = static_cast<bf16*>(a.out) + (token * num_heads + head0) * HD;
      for (int i = threadIdx.x; i < ng * HD; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
    }
    return;
  }

  const bf16* q = static_cast<const bf16*>(a.q);
  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int kv_heads = a.num_kv_heads;

  float qf[GC][8];
  load_group_queries<GC>(q + (token * num_heads + head0) * HD + d0, HD, ng, a.scale, qf);

  float* scores = smem;  // [GC][part_tokens]
  // Phase 1: scores, kUnroll keys per row group in flight. Trip counts are uniform per warp so
  // the shuffles see every lane.
  for (int jb = begin + warp * kRowsPerWarp; jb < end; jb += kRows * kUnroll) {
    float kf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * kRows;
      if (j < end) {
        load8(kc + (slot_of(table, j, a.block_size) * kv_heads + kvh) * HD + d0, kf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * kRows;
      const bool valid = j < end;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[g][e], kf[u][e], d);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (valid && li == 0 && g < ng) {
          if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap);
          scores[g * part_tokens + (j - begin)] = d;
        }
      }
    }
  }
  __syncthreads();
  // Phase 2: softmax statistics, one warp per head.
  for (int g = warp; g < ng; g += kDecodeWarps) {
    float* sc = scores + g * part_tokens;
    float mx = -INFINITY;
    for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, sc[t]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int t = lane; t < nt; t += 32) {
      const float e = expf(sc[t] - mx);
      sc[t] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      stat_m[g] = mx;
      stat_l[g] = sum;
    }
  }
  __syncthreads();
  // Phase 3: weighted values.
  float acc[GC][8];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
  for (int jb = begin + row_id; jb < end; jb += kRows * kUnroll) {
    float vf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * kRows;
      if (j < end) load8(vc + (slot_of(table, j, a.block_size) * kv_heads + kvh) * HD + d0, vf[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * kRows;
      if (j >= end) break;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        if (g < ng) {
          const float p = scores[g * part_tokens + (j - begin)];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(p, vf[u][e], acc[g][e]);
        }
      }
    }
  }
  __syncthreads();
  float* red = smem;  // [kRows][GC][HD], reuses the scores
#pragma unroll
  for (int g = 0; g < GC; ++g) {
#pragma unroll
    for (int e = 0; e < 8; ++e) red[(row_id * GC + g) * HD + d0 + e] = acc[g][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ng * HD; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum += red[(r * GC + g) * HD + d];
    const float v = sum / stat_l[g];
    if (num_splits == 1) {
      static_cast<bf16*>(a.out)[(token * num_heads + head0 + g) * HD + d] = __float2bfloat16_rn(v);
    } else {
      const int64_t pi = part_base + static_cast<int64_t>(g) * num_splits;
      // partial layout: m [nd, H, S], l [nd, H, S], o [nd, H, S, HD] after them.
      float* pm = partial;
      float* pl = partial + static_cast<int64_t>(gridDim.z) * num_heads * num_splits;
      float* po = pl + static_cast<int64_t>(gridDim.z) * num_heads * num_splits;
      po[pi * HD + d] = v;
      if (d == 0) {
        pm[pi] = stat_m[g];
        pl[pi] = stat_l[g];
      }
    }
  }
}

// Decode, single pass (flash-decoding inner loop): each row group keeps a running max, sum and
// weighted value per head, so K and V of kUnroll keys are in flight together and no scores go
// through shared memory; the split's block ids are staged in shared memory first. Row groups are
// merged at the end the way splits are merged. Same outputs and partial layout as decode_kernel.
template <int HD, int GC>
__global__ void __launch_bounds__(kDecodeThreads) decode_v2_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs,
                                                                  int num_chunks, int num_splits, int part_tokens,
                                                                  float* __restrict__ partial) {
  pdl_begin();
  constexpr int kLanes = HD / 8;
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kRows = kDecodeWarps * kRowsPerWarp;
  extern __shared__ float red_acc[];  // [kRows][GC][HD]
  __shared__ float red_m[kRows][GC], red_l[kRows][GC];
  __shared__ int32_t blocks[kMaxPartition + 2];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / num_chunks, chunk = blockIdx.y % num_chunks;
  const int di = blockIdx.z;
  const int s = decode_seqs != nullptr ? decode_seqs[di] : di;
  const int group = a.num_heads / a.num_kv_heads;
  const int g0 = chunk * GC;
  const int ng = min(GC, group - g0);
  const int head0 = kvh * group + g0;
  const int64_t token = a.query_start_loc[s];
  const int seq_len = a.seq_lens[s];
  const int pos = seq_len - 1;
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int begin = max(lo, split * part_tokens);
  const int end = min(seq_len, (split + 1) * part_tokens);
  const int num_heads = a.num_heads;
  const int64_t part_base = (static_cast<int64_t>(di) * num_heads + head0) * num_splits + split;
  if (end - begin <= 0) {
    if (num_splits > 1) {
      for (int g = threadIdx.x; g < ng; g += blockDim.x) partial[part_base + static_cast<int64_t>(g) * num_splits] = -INFINITY;
    } else {
      bf16* o = static_cast<bf16*>(a.out) + (token * num_heads + head0) * HD;
      for (int i = threadIdx.x; i < ng * HD; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
    }
    return;
  }
  const int bs = a.block_size;
  const int b0 = begin / bs, nb = (end - 1) / bs - b0 + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) blocks[i] = table[b0 + i];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rsub = lane / kLanes, li = lane % kLanes;
  const int row_id = warp * kRowsPerWarp + rsub;
  const int d0 = li * 8;
  const bf16* q = static_cast<const bf16*>(a.q);
  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  const int kv_heads = a.num_kv_heads;
  float qf[GC][8];
  load_group_queries<GC>(q + (token * num_heads + head0) * HD + d0, HD, ng, a.scale, qf);
  float m[GC], l[GC], acc[GC][8];
  init_online_softmax<GC>(m, l, acc);
  __syncthreads();  // block ids staged

  for (int jb = begin + warp * kRowsPerWarp; jb < end; jb += kRows * kUnroll) {
    float kf[kUnroll][8], vf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * kRows;
      if (j < end) {
        const int64_t off = ((static_cast<int64_t>(blocks[j / bs - b0]) * bs + j % bs) * kv_heads + kvh) * HD + d0;
        load8(kc + off, kf[u]);
        load8(vc + off, vf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[u][e] = vf[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool valid = jb + rsub + u * kRows < end;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[g][e], kf[u][e], d);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (valid) {
          if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap);
          const float mn = fmaxf(m[g], d);
          const float sc = expf(m[g] - mn);
          const float p = expf(d - mn);
          l[g] = l[g] * sc + p;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(p, vf[u][e], acc[g][e] * sc);
          m[g] = mn;
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    if (li == 0) {
      red_m[row_id][g] = m[g];
      red_l[row_id][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) red_acc[(row_id * GC + g) * HD + d0 + e] = acc[g][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ng * HD; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kRows; ++r) mx = fmaxf(mx, red_m[r][g]);
    float sum = 0.0f, num = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float w = red_m[r][g] == -INFINITY ? 0.0f : expf(red_m[r][g] - mx);
      sum += red_l[r][g] * w;
      num += red_acc[(r * GC + g) * HD + d] * w;
    }
    const float v = num / sum;
    if (num_splits == 1) {
      static_cast<bf16*>(a.out)[(token * num_heads + head0 + g) * HD + d] = __float2bfloat16_rn(v);
    } else {
      const int64_t pi = part_base + static_cast<int64_t>(g) * num_splits;
      float* pm = partial;
      float* pl = partial + static_cast<int64_t>(gridDim.z) * num_heads * num_splits;
      float* po = pl + static_cast<int64_t>(gridDim.z) * num_heads * num_splits;
      po[pi * HD + d] = v;
      if (d == 0) {
        pm[pi] = mx;
        pl[pi] = sum;
      }
    }
  }
}

__global__ void decode_combine_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs, int num_decode,
                                      int num_splits, const float* __restrict__ partial) {
  pdl_begin();
  const int h = blockIdx.x, di = blockIdx.y;
  const int s = decode_seqs != nullptr ? decode_seqs[di] : di;
  const int64_t token = a.query_start_loc[s];
  const int hd = a.head_dim;
  const int64_t base = (static_cast<int64_t>(di) * a.num_heads + h) * num_splits;
  const float* pm = partial;
  const float* pl = partial + static_cast<int64_t>(num_decode) * a.num_heads * num_splits;
  const float* po = pl + static_cast<int64_t>(num_decode) * a.num_heads * num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < num_splits; ++i) mx = fmaxf(mx, pm[base + i]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
      for (int i = 0; i < num_splits; ++i) {
        const float m = pm[base + i];
        if (m == -INFINITY) continue;
        const float w = pl[base + i] * expf(m - mx);
        num += w * po[(base + i) * hd + d];
        den += w;
      }
    }
    static_cast<bf16*>(a.out)[(token * a.num_heads + h) * hd + d] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
}


// ---------------------------------------------------------------------------------------------
// Decode v3 (default): a CTA owns (split, sequence) and every kv head, so it streams whole cache
// rows (kv_heads * head_dim contiguous values per token, whole blocks back to back) instead of one
// head's 256 bytes at a 2 KB stride. Tiles of kT tokens (K and V) go through a kStages-deep
// cp.async pipeline in shared memory, so two tiles are in flight while one is consumed. Warp w
// serves kv head w % KVH (warps w / KVH split that head's tokens); a row group of HD / 8 lanes
// scores one token against every query head of the group and keeps an online softmax per head,
// updated once per tile. Row groups are merged at the end, splits by decode_combine_kernel.
constexpr int kV3Threads = 256;
constexpr int kV3Warps = kV3Threads / 32;
constexpr int kV3Stages = 3;
constexpr int kV3MinSeqs = 8;  // fewer decode sequences: the per-head kernel (see plan_decode_split)
constexpr float kLog2e = 1.4426950408889634f;

template <int HD, int KVH>
struct V3Shape {
  static constexpr int kLanes = HD / 8;                    // lanes per row group
  static constexpr int kRpw = 32 / kLanes;                 // row groups per warp
  static constexpr int kWph = kV3Warps / KVH;              // warps per kv head
  static constexpr int kRow = KVH * HD;                    // values per cache row (token)
  static constexpr int kByBytes = 16384 / (kRow * 2);      // tokens in 16 KB of K
  static constexpr int kMinT = kWph * kRpw;                // one token per row group
  static constexpr int kT = kByBytes > 32 ? 32 : (kByBytes < kMinT ? kMinT : kByBytes);
  static constexpr int kPerRow = kT / kMinT;               // tokens per row group per tile
  static constexpr int kChunks = kT * kRow / 8;            // 16-byte chunks per K (or V) tile
  static constexpr size_t kStageBytes = static_cast<size_t>(2) * kT * kRow * sizeof(bf16);
  static_assert(kV3Warps % KVH == 0 && kT % kMinT == 0, "v3 decode shape");
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int HD, int KVH, int GC>
size_t v3_smem_bytes() {
  using S = V3Shape<HD, KVH>;
  const size_t pipe = kV3Stages * S::kStageBytes;
  const size_t red = static_cast<size_t>(kV3Warps) * S::kRpw * GC * HD * sizeof(float);
  return std::max(pipe, red);
}

template <int HD, int KVH, int GC>
__global__ void __launch_bounds__(kV3Threads, GC >= 8 ? 1 : 2)
    decode_v3_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs, int num_decode, int num_splits,
                     int part_tokens, float* __restrict__ partial) {
  using S = V3Shape<HD, KVH>;
  // Metadata and block tables are host-staged and the cache rows other than the newest token's
  // are older than this step: all of that is read (or pulled into L2) before waiting for the
  // previous kernel. Everything written, q, and the cp.async copies come after the wait.
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char v3_smem[];
  __shared__ float red_m[kV3Warps * S::kRpw][GC], red_l[kV3Warps * S::kRpw][GC];
  __shared__ int32_t blocks[kMaxPartition + 2];

  const int split = blockIdx.x, di = blockIdx.y;
  const int s = decode_seqs != nullptr ? decode_seqs[di] : di;
  const int group = a.num_heads / KVH;  // <= GC
  const int num_heads = a.num_heads;
  const int64_t token = a.query_start_loc[s];
  const int seq_len = a.seq_lens[s];
  const int pos = seq_len - 1;
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int split_begin = split * part_tokens;
  const int begin = max(lo, split_begin);
  const int end = min(seq_len, split_begin + part_tokens);
  const int64_t part_stride = static_cast<int64_t>(num_decode) * num_heads * num_splits;
  if (end - begin <= 0) {
    pdl_wait();
    if (num_splits > 1) {
      for (int h = threadIdx.x; h < num_heads; h += blockDim.x) {
        partial[(static_cast<int64_t>(di) * num_heads + h) * num_splits + split] = -INFINITY;
      }
    } else {
      bf16* o = static_cast<bf16*>(a.out) + token * num_heads * HD;
      for (int i = threadIdx.x; i < num_heads * HD; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
    }
    return;
  }
  const int bs = a.block_size;
  const int t0 = split_begin + ((begin - split_begin) / S::kT) * S::kT;  // first tile (part_tokens % kT == 0)
  const int ntiles = (end - t0 + S::kT - 1) / S::kT;
  const int b_first = t0 / bs, nb = (end - 1) / bs - b_first + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) blocks[i] = table[b_first + i];
  __syncthreads();

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  {
    // The first tiles the pipeline will ask for, towards L2 (one 128-byte line per thread step).
    constexpr int kLinesPerRow = S::kRow * 2 / 128;
    const int first = max(begin, t0), last = min(end, t0 + (kV3Stages - 1) * S::kT);
    for (int c = threadIdx.x; c < (last - first) * kLinesPerRow; c += kV3Threads) {
      const int j = first + c / kLinesPerRow;
      const int64_t off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * S::kRow +
                          (c % kLinesPerRow) * 64;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kc + off));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vc + off));
    }
  }
  pdl_wait();
  bf16* stage_base = reinterpret_cast<bf16*>(v3_smem);
  // Tiles start at multiples of kT; when the block size is a multiple of kT too, a tile's rows
  // are one contiguous run of the cache: one block lookup per tile, no division per chunk.
  const bool tile_in_block = bs % S::kT == 0;
  auto load_tile = [&](int tile) {
    bf16* ks = stage_base + static_cast<size_t>(tile % kV3Stages) * 2 * S::kT * S::kRow;
    bf16* vs = ks + S::kT * S::kRow;
    const int tb = t0 + tile * S::kT;
    constexpr int kChunksPerRow = S::kRow / 8;
    if (tile_in_block) {
      const int64_t base = (static_cast<int64_t>(blocks[tb / bs - b_first]) * bs + tb % bs) * S::kRow;
#pragma unroll 4
      for (int c = threadIdx.x; c < S::kChunks; c += kV3Threads) {
        const int j = tb + c / kChunksPerRow;
        const bool valid = j >= begin && j < end;
        const int64_t off = valid ? base + static_cast<int64_t>(c) * 8 : 0;
        cp_async16(ks + c * 8, kc + off, valid);
        cp_async16(vs + c * 8, vc + off, valid);
      }
      return;
    }
    for (int c = threadIdx.x; c < S::kChunks; c += kV3Threads) {
      const int tt = c / kChunksPerRow, ch = c % kChunksPerRow;
      const int j = tb + tt;
      const bool valid = j >= begin && j < end;
      int64_t off = 0;
      if (valid) off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * S::kRow + ch * 8;
      cp_async16(ks + c * 8, kc + off, valid);
      cp_async16(vs + c * 8, vc + off, valid);
    }
  };
#pragma unroll
  for (int i = 0; i < kV3Stages - 1; ++i) {
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
    cp_async_wait<kV3Stages - 2>();
    __syncthreads();  // tile i is in for every thread; tile i - 1's stage is free again
    if (i + kV3Stages - 1 < ntiles) load_tile(i + kV3Stages - 1);
    cp_async_commit();
    const bf16* ks = stage_base + static_cast<size_t>(i % kV3Stages) * 2 * S::kT * S::kRow;
    const bf16* vs = ks + S::kT * S::kRow;
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
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[g][e], kf[e], d);
#pragma unroll
        for (int o = S::kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
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

  float* red_acc = reinterpret_cast<float*>(v3_smem);  // [warp * kRpw + rsub][GC][HD]
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
    if (num_splits == 1) {
      static_cast<bf16*>(a.out)[(token * num_heads + h) * HD + d] = __float2bfloat16_rn(v);
    } else {
      const int64_t pi = (static_cast<int64_t>(di) * num_heads + h) * num_splits + split;
      float* pm = partial;
      float* pl = partial + part_stride;
      float* po = pl + part_stride;
      po[pi * HD + d] = v;
      if (d == 0) {
        pm[pi] = mx == -INFINITY ? -INFINITY : mx * 0.6931471805599453f;  // natural-log units for the combine
        pl[pi] = sum;
      }
    }
  }
}

// KVASIR_CUDA_ATTN=1 selects the three-phase decode kernel, 2 the single-pass per-head one, 3 v3
// for every batch (the op tests use it); unset: v3 from kV3MinSeqs sequences where shapes allow.
int decode_kernel_choice() {
  static const int v = [] {
    const char* e = std::getenv("KVASIR_CUDA_ATTN");
    if (e != nullptr && e[0] >= '1' && e[0] <= '3') return e[0] - '0';
    return 0;
  }();
  return v;
}
bool decode_v2() { return decode_kernel_choice() == 2; }

bool v3_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  if (decode_kernel_choice() == 1 || decode_kernel_choice() == 2) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (num_kv_heads != 1 && num_kv_heads != 2 && num_kv_heads != 4 && num_kv_heads != 8) return false;
  const int group = num_heads / num_kv_heads;
  return group >= 1 && group <= 8 && num_heads % num_kv_heads == 0;
}

template <int HD, int KVH, int GC>
void launch_v3_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                 cudaStream_t s) {
  dim3 grid(sp.num_splits, nd);
  launch(decode_v3_kernel<HD, KVH, GC>, grid, kV3Threads, v3_smem_bytes<HD, KVH, GC>(), s, a, decode_seqs, nd,
         sp.num_splits, sp.partition_tokens, partial);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <int HD, int KVH>
void launch_v3_kvh(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                   cudaStream_t s) {
  const int group = a.num_heads / KVH;
  if (group <= 1) launch_v3_t<HD, KVH, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_v3_t<HD, KVH, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_v3_t<HD, KVH, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_v3_t<HD, KVH, 8>(a, decode_seqs, nd, sp, partial, s);
}

template <int HD>
void launch_v3_hd(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                  cudaStream_t s) {
  switch (a.num_kv_heads) {
    case 1: launch_v3_kvh<HD, 1>(a, decode_seqs, nd, sp, partial, s); break;
    case 2: launch_v3_kvh<HD, 2>(a, decode_seqs, nd, sp, partial, s); break;
    case 4: launch_v3_kvh<HD, 4>(a, decode_seqs, nd, sp, partial, s); break;
    default: launch_v3_kvh<HD, 8>(a, decode_seqs, nd, sp, partial, s); break;
  }
}

template <int HD, int KVH, int GC>
void init_v3_t() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(decode_v3_kernel<HD, KVH, GC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(v3_smem_bytes<HD, KVH, GC>())));
}
template <int HD, int KVH>
void init_v3_kvh() {
  init_v3_t<HD, KVH, 1>();
  init_v3_t<HD, KVH, 2>();
  init_v3_t<HD, KVH, 4>();
  init_v3_t<HD, KVH, 8>();
}
template <int HD>
void init_v3_hd() {
  init_v3_kvh<HD, 1>();
  init_v3_kvh<HD, 2>();
  init_v3_kvh<HD, 4>();
  init_v3_kvh<HD, 8>();
}

template <int HD, int GC>
void launch_decode_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                     cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  const int chunks = (group + GC - 1) / GC;
  constexpr int kRows = kDecodeWarps * (32 / (HD / 8));
  const size_t floats = std::max<size_t>(static_cast<size_t>(GC) * sp.partition_tokens, static_cast<size_t>(kRows) * GC * HD);
  dim3 grid(sp.num_splits, a.num_kv_heads * chunks, nd);
  if (decode_v2()) {
    launch(decode_v2_kernel<HD, GC>, grid, kDecodeThreads, static_cast<size_t>(kRows) * GC * HD * sizeof(float), s, a,
           decode_seqs, chunks, sp.num_splits, sp.partition_tokens, partial);
  } else {
    launch(decode_kernel<HD, GC>, grid, kDecodeThreads, floats * sizeof(float), s, a, decode_seqs, chunks, sp.num_splits,
           sp.partition_tokens, partial);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
  if (sp.num_splits > 1) {
    launch(decode_combine_kernel, dim3(a.num_heads, nd), std::min(HD, 256), 0, s, a, decode_seqs, nd, sp.num_splits, partial);
    KVASIR_CUDA_LAUNCH_CHECK();
  }
}

template <int HD>
void launch_decode_hd(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                      cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  if (group <= 1) launch_decode_t<HD, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_decode_t<HD, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_decode_t<HD, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_decode_t<HD, 8>(a, decode_seqs, nd, sp, partial, s);
}

}  // namespace

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }


void init_decode_attention_kernels() {
  init_v3_hd<64>();
  init_v3_hd<128>();
  init_v3_hd<256>();
}

DecodeSplit plan_decode_split(int num_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                              int max_blocks_per_seq, int block_size, int num_sms) {
  DecodeSplit sp;
  const int capacity = std::max(1, max_blocks_per_seq * block_size);
  // v3 streams well but serialises a split's tiles in one CTA: for a handful of sequences the
  // per-head kernel's many small CTAs finish sooner (batch 1: 5.76 vs 6.11 ms per step).
  const bool v3_batch = num_decode_seqs >= kV3MinSeqs || decode_kernel_choice() == 3;
  if (v3_batch && v3_shape_ok(num_heads, num_kv_heads, head_dim)) {
    // One CTA per (split, sequence), two resident per SM: aim for four CTAs per SM so the ragged
    // ends of sequences balance out; splits are multiples of 32 tokens (every v3 tile divides 32).
    sp.v3 = true;
    const int base = std::max(1, num_decode_seqs);
    const int wanted = std::max(1, (4 * num_sms + base - 1) / base);
    int part = (capacity + wanted - 1) / wanted;
    part = std::min(kMaxPartition, std::max(32, ((part + 31) / 32) * 32));
    sp.partition_tokens = part;
    sp.num_splits = (capacity + part - 1) / part;
    return sp;
  }
  const int base = std::max(1, num_decode_seqs * num_kv_heads);
  const int wanted = std::max(1, (2 * num_sms + base - 1) / base);
  int part = (capacity + wanted - 1) / wanted;
  part = ((part + block_size - 1) / block_size) * block_size;
  part = std::max(part, std::max(block_size, 16));
  if (part > kMaxPartition) part = std::max(block_size, (kMaxPartition / block_size) * block_size);
  sp.partition_tokens = part;
  sp.num_splits = (capacity + part - 1) / part;
  return sp;
}

int64_t decode_scratch_floats(int num_decode_seqs, int num_heads, int head_dim, const DecodeSplit& split) {
  if (split.num_splits <= 1) return 0;
  return static_cast<int64_t>(num_decode_seqs) * num_heads * split.num_splits * (head_dim + 2);
}

void launch_decode_attention(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                             float* partial, cudaStream_t s) {
  if (nd <= 0) return;
  if (sp.v3) {
    KVASIR_CHECK_MSG(v3_shape_ok(a.num_heads, a.num_kv_heads, a.head_dim), "attention: split planned for v3");
    switch (a.head_dim) {
      case 64: launch_v3_hd<64>(a, decode_seqs, nd, sp, partial, s); break;
      case 128: launch_v3_hd<128>(a, decode_seqs, nd, sp, partial, s); break;
      default: launch_v3_hd<256>(a, decode_seqs, nd, sp, partial, s); break;
    }
    if (sp.num_splits > 1) {
      launch(decode_combine_kernel, dim3(a.num_heads, nd), std::min(a.head_dim, 256), 0, s, a, decode_seqs, nd,
             sp.num_splits, partial);
      KVASIR_CUDA_LAUNCH_CHECK();
    }
    return;
  }
  switch (a.head_dim) {
    case 64: launch_decode_hd<64>(a, decode_seqs, nd, sp, partial, s); break;
    case 128: launch_decode_hd<128>(a, decode_seqs, nd, sp, partial, s); break;
    case 256: launch_decode_hd<256>(a, decode_seqs, nd, sp, partial, s); break;
    default: KVASIR_CHECK_MSG(false, "attention: unsupported head_dim");
  }
}



}  // namespace kvasir::cuda
