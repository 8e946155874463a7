// Shared by the paged decode-attention kernels (attention_decode_v12.cu, _v3.cu, _tma.cu)
// and their dispatcher (attention.cu): the GQA group's query load, the online-softmax state,
// cp.async helpers, and the internal launchers. Device helpers and declarations only; the split
// plan and the kernel choice live in attention.cu.
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kMaxPartition = 512;
constexpr int kUnroll = 4;     // keys per row group in flight in the per-head decode kernels
constexpr int kV5MinSeqs = 8;  // fewer decode sequences: v3 runs the v3 plan (see launch_decode_attention)
constexpr float kLog2e = 1.4426950408889634f;

// The keys one CTA of the split-KV decode kernels covers: split `split` of decode sequence `di`;
// keys [begin, end) of that sequence's context, sliding window applied.
struct SplitKeys {
  int split, di, s, seq_len, split_begin, begin, end;
  int64_t token;  // the sequence's query row
};

__device__ __forceinline__ SplitKeys split_keys(const AttentionArgs& a, const int32_t* decode_seqs,
                                                int part_tokens, int split, int di) {
  SplitKeys k;
  k.split = split;
  k.di = di;
  k.s = decode_seqs != nullptr ? decode_seqs[k.di] : k.di;
  k.token = a.query_start_loc[k.s];
  k.seq_len = a.seq_lens[k.s];
  const int pos = k.seq_len - 1;
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  k.split_begin = k.split * part_tokens;
  k.begin = max(lo, k.split_begin);
  k.end = min(k.seq_len, k.split_begin + part_tokens);
  return k;
}

// A CTA with no keys (its split lies past the context or before the window): a -inf partial so
// the combine skips it or, unsplit, a zero output row.
__device__ __forceinline__ void finish_empty_split(const AttentionArgs& a, const SplitKeys& k, int num_splits,
                                                   int head_dim, float* partial) {
  pdl_wait();
  if (num_splits > 1) {
    for (int h = threadIdx.x; h < a.num_heads; h += blockDim.x) {
      partial[(static_cast<int64_t>(k.di) * a.num_heads + h) * num_splits + k.split] = -INFINITY;
    }
  } else {
    bf16* o = static_cast<bf16*>(a.out) + k.token * a.num_heads * head_dim;
    for (int i = threadIdx.x; i < a.num_heads * head_dim; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
  }
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

// KVASIR_CUDA_ATTN: 1 the three-phase per-head kernel, 2 the single-pass per-head one, 3 v3 for
// every batch, 5 v5 for every batch (where its shape allows, else v3); 0 (unset) the default.
int decode_kernel_choice();
bool v3_shape_ok(int num_heads, int num_kv_heads, int head_dim);

// Per-head kernels (v1, or v2 when chosen); with num_splits > 1 they leave partials for the combine.
void launch_decode_per_head(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                            float* partial, cudaStream_t s);
// v3 (the all-heads pipelined kernel); needs v3_shape_ok.
void launch_decode_v3(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s);
void init_decode_v3_kernels();
// v5 (attention_decode_tma.cu): v3's split plan and partials, tensor cores and bulk copies; takes
// 8 kv heads of 128 dims only.
bool v5_shape_ok(int num_heads, int num_kv_heads, int head_dim);
void launch_decode_v5(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s);
void init_decode_v5_kernels();
// Merges the splits' partials (m, l, o) into the output rows.
void launch_decode_combine(const AttentionArgs& a, const int32_t* decode_seqs, int nd, int num_splits,
                           const float* partial, cudaStream_t s);

}  // namespace kvasir::cuda
