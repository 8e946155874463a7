// Paged decode attention over the block-table KV cache ([num_blocks, block_size, kv_heads,
// head_dim]), split-KV flash-decoding: the split plan, the choice of kernel (per-head v1/v2 in
// attention_decode_v12.cu, all-heads v3 in attention_decode_v3.cu) and the kernel that merges the
// splits' partial results. Launch shapes never depend on sequence lengths (graph replay stays
// valid as sequences grow). The prefill / mixed kernel is in attention_prefill.cu.
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/env_knob.h"

namespace kvasir::cuda {
namespace {

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

}  // namespace

// KVASIR_CUDA_ATTN=1 selects the three-phase decode kernel, 2 the single-pass per-head one, 3 v3
// and 5 v5 for every batch (the op tests use them); unset: the v3 plan wherever its shape allows,
// run by v5 from kV5MinSeqs decode sequences where v5's shape allows (at batch 256 x 1,024-token
// contexts v5 took 0.30 ms per layer against v3's 0.40: 3.6 vs 2.7 TB/s of KV), else by v3; but
// below kV5MinSeqs, where v3's plan would launch fewer CTAs than the GPU has SMs (its splits are
// at least 32 tokens of every kv head), the per-head v1 plan (ncu, batch 1 at 144 tokens: v3 on
// 5 CTAs 16.0 us + combine 3.9, v1 on 80 CTAs 7.4 + 5.1; H200, 2026-11-29).
int decode_kernel_choice() {
  static const int v = [] {
    const char* e = std::getenv("KVASIR_CUDA_ATTN");
    if (e != nullptr && (e[0] == '1' || e[0] == '2' || e[0] == '3' || e[0] == '5')) return e[0] - '0';
    return 0;
  }();
  return v;
}

bool v3_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  if (decode_kernel_choice() == 1 || decode_kernel_choice() == 2) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (num_kv_heads != 1 && num_kv_heads != 2 && num_kv_heads != 4 && num_kv_heads != 8) return false;
  const int group = num_heads / num_kv_heads;
  return group >= 1 && group <= 8 && num_heads % num_kv_heads == 0;
}

void launch_decode_combine(const AttentionArgs& a, const int32_t* decode_seqs, int nd, int num_splits,
                           const float* partial, cudaStream_t s) {
  launch(decode_combine_kernel, dim3(a.num_heads, nd), std::min(a.head_dim, 256), 0, s, a, decode_seqs, nd, num_splits,
         partial);
  KVASIR_CUDA_LAUNCH_CHECK();
}

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void init_decode_attention_kernels() {
  init_decode_v3_kernels();
  init_decode_v5_kernels();
}

// A/B knobs for the v3 split plan: KVASIR_CUDA_V3_CTAS (CTAs per SM aimed for, default 4) and
// KVASIR_CUDA_V3_PART (largest split in tokens, default kMaxPartition).

DecodeSplit plan_decode_split(int num_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                              int max_blocks_per_seq, int block_size, int num_sms) {
  static const int v3_ctas = env_int("KVASIR_CUDA_V3_CTAS", 4, 1, 64);
  static const int v3_part = env_int("KVASIR_CUDA_V3_PART", kMaxPartition, 32, kMaxPartition) / 32 * 32;
  // KVASIR_CUDA_V3_MIN_CTAS: below kV5MinSeqs decode sequences, fewer v3 CTAs than this (default:
  // one per SM) run the per-head plan instead; 0 keeps v3 (the plan of ba094b2).
  static const int v3_min_ctas = env_int("KVASIR_CUDA_V3_MIN_CTAS", -1, 0, 1 << 20);
  DecodeSplit sp;
  const int capacity = std::max(1, max_blocks_per_seq * block_size);
  // The per-head kernels (v1, v2) only when forced or where v3's shape does not fit.
  if (v3_shape_ok(num_heads, num_kv_heads, head_dim)) {
    // One CTA per (split, sequence), two resident per SM: aim for four CTAs per SM so the ragged
    // ends of sequences balance out; splits are multiples of 32 tokens (every v3 tile divides 32).
    sp.v3 = true;
    const int base = std::max(1, num_decode_seqs);
    const int wanted = std::max(1, (v3_ctas * num_sms + base - 1) / base);
    int part = (capacity + wanted - 1) / wanted;
    part = std::min(v3_part, std::max(32, ((part + 31) / 32) * 32));
    sp.partition_tokens = part;
    sp.num_splits = (capacity + part - 1) / part;
    const int min_ctas = v3_min_ctas < 0 ? num_sms : v3_min_ctas;
    const bool starved = decode_kernel_choice() == 0 && num_decode_seqs < kV5MinSeqs &&
                         static_cast<int64_t>(base) * sp.num_splits < min_ctas;
    if (!starved) return sp;
    sp = DecodeSplit{};
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
    const bool v5 = decode_kernel_choice() == 5 || (decode_kernel_choice() == 0 && nd >= kV5MinSeqs);
    if (v5 && v5_shape_ok(a.num_heads, a.num_kv_heads, a.head_dim)) {
      launch_decode_v5(a, decode_seqs, nd, sp, partial, s);
    } else {
      launch_decode_v3(a, decode_seqs, nd, sp, partial, s);
    }
  } else {
    launch_decode_per_head(a, decode_seqs, nd, sp, partial, s);
  }
  if (sp.num_splits > 1) launch_decode_combine(a, decode_seqs, nd, sp.num_splits, partial, s);
}

}  // namespace kvasir::cuda
