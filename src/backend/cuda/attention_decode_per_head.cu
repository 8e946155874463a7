// Paged decode attention, per-head kernels: a CTA owns (split, kv head, sequence) and every query
// head of its GQA group, so each key and value is read once per group. The phased kernel scores a
// split's keys, then runs the softmax, then weights the values (three phases through shared
// memory); the online kernel does one online-softmax pass. Used when forced (KVASIR_CUDA_ATTN=
// per_head_phased, per_head_online) or where the all-heads shape does not fit
// (attention.cu decides).
#include <algorithm>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/kv_cache_codes.cuh"

namespace kvasir::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// What the phased and online kernels share: a CTA owns split blockIdx.x, kv head kvh with GC query heads of its GQA
// group from head0 (chunk blockIdx.y % num_chunks; ng of them live) and decode sequence blockIdx.z.
struct HeadChunk {
  SplitKeys keys;
  int kvh, ng, head0;
};
template <int GC>
__device__ __forceinline__ HeadChunk head_chunk(const AttentionArgs& a, const int32_t* decode_seqs, int num_chunks,
                                                int part_tokens) {
  HeadChunk c;
  c.keys = split_keys(a, decode_seqs, part_tokens, blockIdx.x, blockIdx.z);
  c.kvh = blockIdx.y / num_chunks;
  const int chunk = blockIdx.y % num_chunks;
  const int group = a.num_heads / a.num_kv_heads;
  const int g0 = chunk * GC;
  c.ng = min(GC, group - g0);
  c.head0 = c.kvh * group + g0;
  return c;
}

// Lanes of a "row group" (head_dim / 8 lanes, 8 dims each from d0) share one key; a warp works on
// kRowsPerWarp keys at once, the CTA on kRows; row_id is the thread's row group in the CTA.
template <int HD>
struct RowGroupLanes {
  static constexpr int kLanes = HD / 8;
  static constexpr int kRowsPerWarp = 32 / kLanes;
  static constexpr int kRows = kDecodeWarps * kRowsPerWarp;
  int warp, lane, rsub, li, row_id, d0;
  __device__ __forceinline__ RowGroupLanes()
      : warp(threadIdx.x >> 5), lane(threadIdx.x & 31), rsub(lane / kLanes), li(lane % kLanes),
        row_id(warp * kRowsPerWarp + rsub), d0(li * 8) {}
};

// Decode, three phases. C: the cache's element type (kv_cache_codes.cuh).
template <typename C, int HD, int GC>
__global__ void __launch_bounds__(kDecodeThreads) decode_per_head_phased_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs,
                                                               int num_chunks, int num_splits, int part_tokens,
                                                               float* __restrict__ partial) {
  using L = RowGroupLanes<HD>;
  extern __shared__ float smem[];
  __shared__ float stat_m[GC], stat_l[GC];
  // Metadata is host-staged and the cache rows other than the newest token's are older than this
  // step: the split's keys and values are pulled towards L2 before waiting for the previous kernel
  // (q, written by it, and everything this kernel writes come after the wait).
  pdl_launch_dependents();

  const HeadChunk hc = head_chunk<GC>(a, decode_seqs, num_chunks, part_tokens);
  const SplitKeys& keys = hc.keys;
  const int s = keys.s, kvh = hc.kvh, ng = hc.ng, head0 = hc.head0;
  const int64_t token = keys.token;
  const int begin = keys.begin, end = keys.end;
  const int nt = end - begin;
  {
    constexpr int kRowBytes = HD * static_cast<int>(sizeof(C));
    constexpr int kLines = kRowBytes / 128 > 0 ? kRowBytes / 128 : 1;  // 128-byte lines per key row
    constexpr int kLineElems = 128 / static_cast<int>(sizeof(C));
    const int32_t* tb = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
    for (int c = threadIdx.x; c < nt * kLines; c += blockDim.x) {
      const int64_t row = slot_of(tb, begin + c / kLines, a.block_size) * a.num_kv_heads + kvh;
      const int64_t off = row * HD + (c % kLines) * kLineElems;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const C*>(a.k_cache) + off));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const C*>(a.v_cache) + off));
    }
  }
  pdl_wait();

  const L lanes;
  const int warp = lanes.warp, lane = lanes.lane, rsub = lanes.rsub, li = lanes.li;
  const int row_id = lanes.row_id, d0 = lanes.d0;
  const int num_heads = a.num_heads;

  if (nt <= 0) {
    write_empty_split(a, keys, num_splits, HD, head0, ng, partial);
    return;
  }

  const bf16* q = static_cast<const bf16*>(a.q);
  const C* kc = static_cast<const C*>(a.k_cache);
  const C* vc = static_cast<const C*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int kv_heads = a.num_kv_heads;

  float qf[GC][8];
  load_group_queries<GC>(q + (token * num_heads + head0) * HD + d0, HD, ng, a.scale, qf);

  float* scores = smem;  // [GC][part_tokens]
  // Phase 1: scores, kUnroll keys per row group in flight. Trip counts are uniform per warp so
  // the shuffles see every lane.
  for (int jb = begin + warp * L::kRowsPerWarp; jb < end; jb += L::kRows * kUnroll) {
    float kf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * L::kRows;
      if (j < end) {
        load8(kc + (slot_of(table, j, a.block_size) * kv_heads + kvh) * HD + d0, kf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * L::kRows;
      const bool valid = j < end;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float d = row_group_dot<L::kLanes>(qf[g], kf[u]);
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
  for (int jb = begin + row_id; jb < end; jb += L::kRows * kUnroll) {
    float vf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * L::kRows;
      if (j < end) load8(vc + (slot_of(table, j, a.block_size) * kv_heads + kvh) * HD + d0, vf[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * L::kRows;
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
  float* red = smem;  // [L::kRows][GC][HD], reuses the scores
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
    for (int r = 0; r < L::kRows; ++r) sum += red[(r * GC + g) * HD + d];
    const float v = sum / stat_l[g];
    store_split_result(a, keys, static_cast<int64_t>(gridDim.z) * num_heads * num_splits, num_splits, HD, head0 + g,
                       d, v, stat_m[g], stat_l[g], partial);
  }
}

// Decode, single pass (flash-decoding inner loop): each row group keeps a running max, sum and
// weighted value per head, so K and V of kUnroll keys are in flight together and no scores go
// through shared memory; the split's block ids are staged in shared memory first. Row groups are
// merged at the end the way splits are merged. Same outputs and partial layout as decode_per_head_phased_kernel.
template <typename C, int HD, int GC>
__global__ void __launch_bounds__(kDecodeThreads) decode_per_head_online_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs,
                                                                  int num_chunks, int num_splits, int part_tokens,
                                                                  float* __restrict__ partial) {
  pdl_begin();
  using L = RowGroupLanes<HD>;
  extern __shared__ float red_acc[];  // [L::kRows][GC][HD]
  __shared__ float red_m[L::kRows][GC], red_l[L::kRows][GC];
  __shared__ int32_t blocks[kMaxPartition + 2];

  const HeadChunk hc = head_chunk<GC>(a, decode_seqs, num_chunks, part_tokens);
  const SplitKeys& keys = hc.keys;
  const int kvh = hc.kvh, ng = hc.ng, head0 = hc.head0;
  if (keys.end - keys.begin <= 0) {
    write_empty_split(a, keys, num_splits, HD, head0, ng, partial);
    return;
  }
  const int64_t token = keys.token;
  const int begin = keys.begin, end = keys.end;
  const int num_heads = a.num_heads;
  const int bs = a.block_size;
  const int b0 = stage_block_ids(a, keys.s, begin, end, blocks);

  const L lanes;
  const int warp = lanes.warp, rsub = lanes.rsub, li = lanes.li, row_id = lanes.row_id, d0 = lanes.d0;
  const bf16* q = static_cast<const bf16*>(a.q);
  const C* kc = static_cast<const C*>(a.k_cache);
  const C* vc = static_cast<const C*>(a.v_cache);
  const int kv_heads = a.num_kv_heads;
  float qf[GC][8];
  load_group_queries<GC>(q + (token * num_heads + head0) * HD + d0, HD, ng, a.scale, qf);
  float m[GC], l[GC], acc[GC][8];
  init_online_softmax<GC>(m, l, acc);
  __syncthreads();  // block ids staged

  for (int jb = begin + warp * L::kRowsPerWarp; jb < end; jb += L::kRows * kUnroll) {
    float kf[kUnroll][8], vf[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + rsub + u * L::kRows;
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
      const bool valid = jb + rsub + u * L::kRows < end;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float d = row_group_dot<L::kLanes>(qf[g], kf[u]);
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
    for (int r = 0; r < L::kRows; ++r) mx = fmaxf(mx, red_m[r][g]);
    float sum = 0.0f, num = 0.0f;
#pragma unroll
    for (int r = 0; r < L::kRows; ++r) {
      const float w = red_m[r][g] == -INFINITY ? 0.0f : expf(red_m[r][g] - mx);
      sum += red_l[r][g] * w;
      num += red_acc[(r * GC + g) * HD + d] * w;
    }
    const float v = num / sum;
    store_split_result(a, keys, static_cast<int64_t>(gridDim.z) * num_heads * num_splits, num_splits, HD, head0 + g,
                       d, v, mx, sum, partial);
  }
}

template <typename C, int HD, int GC>
void launch_decode_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                     cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  const int chunks = (group + GC - 1) / GC;
  constexpr int kRows = RowGroupLanes<HD>::kRows;
  const size_t floats = std::max<size_t>(static_cast<size_t>(GC) * sp.partition_tokens, static_cast<size_t>(kRows) * GC * HD);
  dim3 grid(sp.num_splits, a.num_kv_heads * chunks, nd);
  if (decode_kernel_choice() == DecodeAttentionKernel::kPerHeadOnline) {
    launch(decode_per_head_online_kernel<C, HD, GC>, grid, kDecodeThreads, static_cast<size_t>(kRows) * GC * HD * sizeof(float), s, a,
           decode_seqs, chunks, sp.num_splits, sp.partition_tokens, partial);
  } else {
    launch(decode_per_head_phased_kernel<C, HD, GC>, grid, kDecodeThreads, floats * sizeof(float), s, a, decode_seqs, chunks, sp.num_splits,
           sp.partition_tokens, partial);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <typename C, int HD>
void launch_decode_hd(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                      cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  if (group <= 1) launch_decode_t<C, HD, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_decode_t<C, HD, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_decode_t<C, HD, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_decode_t<C, HD, 8>(a, decode_seqs, nd, sp, partial, s);
}

template <typename C>
void launch_decode_codes(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                         float* partial, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: launch_decode_hd<C, 64>(a, decode_seqs, nd, sp, partial, s); break;
    case 128: launch_decode_hd<C, 128>(a, decode_seqs, nd, sp, partial, s); break;
    case 256: launch_decode_hd<C, 256>(a, decode_seqs, nd, sp, partial, s); break;
    default: KVASIR_CHECK_MSG(false, "attention: unsupported head_dim");
  }
}

}  // namespace

void launch_decode_per_head(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                            float* partial, cudaStream_t s) {
  with_cache_codes(a.kv_cache, [&]<typename C>() { launch_decode_codes<C>(a, decode_seqs, nd, sp, partial, s); });
}

}  // namespace kvasir::cuda
