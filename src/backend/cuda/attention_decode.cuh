// Shared by the paged decode-attention kernels (attention_decode_per_head.cu, _all_heads.cu,
// _mma_bulk.cu)
// and their dispatcher (attention.cu): the GQA group's query load, the online-softmax state,
// cp.async helpers, and the internal launchers. Device helpers and declarations only; the split
// plan and the kernel choice live in attention.cu.
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kMaxPartition = kMaxDecodePartition;  // cuda_tuning.h
constexpr int kUnroll = 4;     // keys per row group in flight in the per-head decode kernels
constexpr int kMmaBulkMinSeqs = 8;  // fewer decode sequences: all_heads runs the all-heads plan
constexpr float kLog2e = 1.4426950408889634f;

// The keys one CTA of the split-KV decode kernels covers: split `split` of decode sequence `di`;
// keys [begin, end) of that sequence's context, sliding window applied.
struct SplitKeys {
  int split, di, s, seq_len, split_begin, begin, end;
  int64_t token;  // the sequence's query row
};

// The launch has gridDim.x splits of at most part_tokens keys each, planned for the block table's
// capacity (launch shapes must not depend on sequence lengths, so graphs stay valid). With
// a.splits_by_context the keys a sequence actually has, from its window's start rounded down to
// kSplitAlign, are spread evenly over all the splits (multiples of kSplitAlign tokens, never more
// than part_tokens): a 32k context in a 128k table keeps every CTA busy instead of a quarter of them.
constexpr int kSplitAlign = 32;  // every all-heads tile size divides it
// How a sequence's keys are laid over the launch's splits: split i covers keys [first + i * part,
// first + (i + 1) * part) of the context, clipped to the window [lo, seq_len). Shared by the decode
// kernels (split_keys) and the combine (live_splits), so they agree on which splits hold keys.
struct SplitLayout {
  int lo, first, part;
};
__device__ __forceinline__ SplitLayout split_layout(const AttentionArgs& a, int seq_len, int part_tokens,
                                                    int num_splits) {
  SplitLayout l;
  const int pos = seq_len - 1;
  l.lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  l.first = 0;
  l.part = part_tokens;
  if (a.splits_by_context) {
    l.first = (l.lo / kSplitAlign) * kSplitAlign;
    const int per_split = (seq_len - l.first + num_splits - 1) / num_splits;
    l.part = min(part_tokens, max(kSplitAlign, (per_split + kSplitAlign - 1) / kSplitAlign * kSplitAlign));
  }
  return l;
}

__device__ __forceinline__ SplitKeys split_keys(const AttentionArgs& a, const int32_t* decode_seqs,
                                                int part_tokens, int split, int di) {
  SplitKeys k;
  k.split = split;
  k.di = di;
  k.s = decode_seqs != nullptr ? decode_seqs[k.di] : k.di;
  k.token = a.query_start_loc[k.s];
  k.seq_len = a.seq_lens[k.s];
  const SplitLayout l = split_layout(a, k.seq_len, part_tokens, static_cast<int>(gridDim.x));
  k.split_begin = l.first + k.split * l.part;
  k.begin = max(l.lo, k.split_begin);
  k.end = min(k.seq_len, k.split_begin + l.part);
  return k;
}

// The splits [lo, hi) of a sequence that hold keys (every one of them does): a short context in a
// long table leaves most splits empty, and the combine reads only these (at batch 1, 136 keys in a
// 40k table: 5 of 66 splits, one round of loads per warp instead of five).
struct LiveSplits {
  int lo, hi;
};
__device__ __forceinline__ LiveSplits live_splits(const AttentionArgs& a, int seq_len, int part_tokens,
                                                  int num_splits) {
  const SplitLayout l = split_layout(a, seq_len, part_tokens, num_splits);
  LiveSplits r;
  r.lo = min(num_splits, (l.lo - l.first) / l.part);
  r.hi = min(num_splits, (seq_len - l.first + l.part - 1) / l.part);
  return r;
}

// What a CTA with no keys (its split lies past the context or before the window) leaves for query
// heads [head0, head0 + nh): a -inf partial so the combine skips it or, unsplit, a zero output row.
// The caller has waited for the previous kernel.
__device__ __forceinline__ void write_empty_split(const AttentionArgs& a, const SplitKeys& k, int num_splits,
                                                  int head_dim, int head0, int nh, float* partial) {
  if (num_splits > 1) {
    for (int h = threadIdx.x; h < nh; h += blockDim.x) {
      partial[(static_cast<int64_t>(k.di) * a.num_heads + head0 + h) * num_splits + k.split] = -INFINITY;
    }
  } else {
    bf16* o = static_cast<bf16*>(a.out) + (k.token * a.num_heads + head0) * head_dim;
    for (int i = threadIdx.x; i < nh * head_dim; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
  }
}

// An all_heads or mma_bulk CTA (it owns every head of the sequence) with no keys: its empty result, after the
// wait. Returns whether the split was empty, for the caller to return at once (the early return
// stays in the kernel, where it was: folding it in here changed mma_bulk's register allocation).
__device__ __forceinline__ bool finish_empty_split(const AttentionArgs& a, const SplitKeys& k, int num_splits,
                                                   int head_dim, float* partial) {
  if (k.end - k.begin > 0) return false;
  pdl_wait();
  write_empty_split(a, k, num_splits, head_dim, 0, a.num_heads, partial);
  return true;
}

// One merged output value (query head h, dim d) of a split: straight to the output row when the
// sequence is not split, else to the partials (m [nd, H, S], l [nd, H, S], o [nd, H, S, HD] after
// them, part_stride = nd * H * S apart; m in natural-log units, written with l once per head, by
// d == 0). part_stride comes from the caller's prologue, as before this helper: computed here, it
// changed all_heads' register allocation.
__device__ __forceinline__ void store_split_result(const AttentionArgs& a, const SplitKeys& k, int64_t part_stride,
                                                   int num_splits, int head_dim, int h, int d, float v, float m,
                                                   float l, float* partial) {
  v *= a.v_scale;  // an FP8 cache's value scale (1 otherwise): the combine is linear in v
  if (num_splits == 1) {
    static_cast<bf16*>(a.out)[(k.token * a.num_heads + h) * head_dim + d] = __float2bfloat16_rn(v);
  } else {
    const int64_t pi = (static_cast<int64_t>(k.di) * a.num_heads + h) * num_splits + k.split;
    float* pm = partial;
    float* pl = partial + part_stride;
    float* po = pl + part_stride;
    po[pi * head_dim + d] = v;
    if (d == 0) {
      pm[pi] = m;
      pl[pi] = l;
    }
  }
}

// The ids of the cache blocks that hold tokens [first, end) of sequence s, staged in shared
// memory (blocks[i] is table entry b_first + i); returns b_first. The caller syncs before reading.
__device__ __forceinline__ int stage_block_ids(const AttentionArgs& a, int s, int first, int end, int32_t* blocks) {
  const int bs = a.block_size;
  const int b_first = first / bs, nb = (end - 1) / bs - b_first + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) blocks[i] = table[b_first + i];
  return b_first;
}

// all_heads and mma_bulk walk a split's keys in tiles of KT tokens that start at multiples of KT from the
// split's first key (part_tokens % KT == 0): tile 0 starts at t0 and holds key `begin`, ntiles of
// them reach `end`. The ids of the blocks those tiles touch go to `blocks` (the caller syncs);
// blocks[0] is table entry b_first. For a split with keys only.
struct KeyTiles {
  int t0, ntiles, b_first;
};
template <int KT>
__device__ __forceinline__ KeyTiles stage_key_tiles(const AttentionArgs& a, const SplitKeys& k, int32_t* blocks) {
  KeyTiles t;
  t.t0 = k.split_begin + ((k.begin - k.split_begin) / KT) * KT;
  t.ntiles = (k.end - t.t0 + KT - 1) / KT;
  t.b_first = stage_block_ids(a, k.s, t.t0, k.end, blocks);
  return t;
}

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

// One key's score against one query row: the row group's lanes (LANES of them, 8 dims each) take
// their 8-dim partial dot (fmaf in dim order) and sum it by xor shuffles, so every lane of the row
// group ends with the same sum. All 32 lanes of the warp must call it.
template <int LANES>
__device__ __forceinline__ float row_group_dot(const float (&q)[8], const float (&k)[8]) {
  float d = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) d = fmaf(q[e], k[e], d);
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
  return d;
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

// KVASIR_CUDA_ATTN (cuda_tuning.h): the kernel forced for every batch (mma_bulk only where its
// shape allows, else all_heads); kAuto (unset) the default plan.
DecodeAttentionKernel decode_kernel_choice();
bool all_heads_shape_ok(int num_heads, int num_kv_heads, int head_dim);

// Per-head kernels (phased, or online when chosen); with num_splits > 1 they leave partials for the combine.
void launch_decode_per_head(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                            float* partial, cudaStream_t s);
// The all-heads pipelined kernel; needs all_heads_shape_ok.
void launch_decode_all_heads(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s);
void init_decode_all_heads_kernels();
// mma_bulk (attention_decode_mma_bulk.cu): the all-heads split plan and partials, tensor cores and bulk copies; takes
// 8 kv heads of 128 dims only.
bool mma_bulk_shape_ok(int num_heads, int num_kv_heads, int head_dim);
void launch_decode_mma_bulk(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s);
void init_decode_mma_bulk_kernels();
// Merges the splits' partials (m, l, o) into the output rows.
void launch_decode_combine(const AttentionArgs& a, const int32_t* decode_seqs, int nd, int num_splits, int part_tokens,
                           const float* partial, cudaStream_t s);

}  // namespace kvasir::cuda
