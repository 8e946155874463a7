// Paged decode attention over the block-table KV cache ([num_blocks, block_size, kv_heads,
// head_dim]), split-KV flash-decoding: the split plan, the choice of kernel (per-head phased or
// online in attention_decode_per_head.cu, all-heads in attention_decode_all_heads.cu, all-heads on
// tensor cores with bulk copies in attention_decode_mma_bulk.cu) and the kernel that merges the
// splits' partial results. Launch shapes never depend on sequence lengths (graph replay stays
// valid as sequences grow). The prefill / mixed kernel is in attention_prefill.cu.
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/attention_decode.cuh"

namespace kvasir::cuda {
namespace {

// One CTA per (query head, decode sequence), in two passes over the splits' partials: the CTA's
// threads first find the largest split max (m) together; then warp w sums splits w, w + WARPS, ...
// weighted by l * e^(m - max), BATCH splits at a time whose rows are all loaded before any is
// summed (lane l holds dims 4l..4l+3 of each 128: one 16-byte load per lane per row), so a warp
// keeps BATCH rows in flight; the warps' sums meet in shared memory. Hundreds of splits (a long
// context at batch 1: 251 on an H100 at 32k) take 16 warps of 16 rows in flight, so each warp's
// rows arrive in one round instead of four dependent ones (CHUNKS 1: head_dim at most 128; H100,
// 32k: 6.9 us a call against 8.0). Splits with no keys (m = -inf) weigh nothing (their rows were
// never written: read, then masked, never multiplied).
// WARPS: 16 for long contexts' hundreds of splits, 4 for batches of a few splits each (thousands
// of CTAs, where most of 16 warps would idle).
constexpr int kCombineMaxDims = 256;
constexpr int kCombineManySplits = 64;

// The partial rows are 16-byte aligned unless the m and l arrays before them hold an odd number of
// pairs of floats (nd x heads x splits not a multiple of 4): then four scalar loads.
__device__ __forceinline__ float4 load_row4(const float* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}

template <int WARPS, int BATCH, int CHUNKS>
__global__ void __launch_bounds__(WARPS * 32) decode_combine_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs,
                                                                    int num_decode, int num_splits, int part_tokens,
                                                                    const float* __restrict__ partial) {
  constexpr int kChunks = CHUNKS;  // float4 chunks per lane: head_dim / 128, rounded up
  __shared__ float warp_max[WARPS], warp_l[WARPS];
  __shared__ __align__(16) float warp_o[WARPS][kCombineMaxDims];
  pdl_begin();
  const int h = blockIdx.x, di = blockIdx.y;
  const int s = decode_seqs != nullptr ? decode_seqs[di] : di;
  const int64_t token = a.query_start_loc[s];
  const int hd = a.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t base = (static_cast<int64_t>(di) * a.num_heads + h) * num_splits;
  const float* pm = partial + base;
  const float* pl = partial + static_cast<int64_t>(num_decode) * a.num_heads * num_splits + base;
  const float* po = partial + 2 * static_cast<int64_t>(num_decode) * a.num_heads * num_splits + base * hd;
  const bool aligned = (reinterpret_cast<uintptr_t>(po) & 15) == 0;
  // An attention sink is one more logit of the head's softmax with no value: it joins the max and
  // the denominator.
  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  // Only the splits that hold keys: the others were written -inf (or, where a kernel skips that,
  // not at all) and weigh nothing.
  const LiveSplits live = live_splits(a, a.seq_lens[s], part_tokens, num_splits);
  float mx = sink;
  for (int i = live.lo + threadIdx.x; i < live.hi; i += WARPS * 32) mx = fmaxf(mx, pm[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) warp_max[warp] = mx;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, warp_max[w]);
  float l = 0.0f;
  float4 o[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) o[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (mx != -INFINITY) {
    for (int i0 = live.lo + warp; i0 < live.hi; i0 += BATCH * WARPS) {
      float w[BATCH];
      float4 row[BATCH][kChunks];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        const int i = i0 + b * WARPS;
        const float mi = i < live.hi ? pm[i] : -INFINITY;
        w[b] = mi != -INFINITY ? pl[i] * expf(mi - mx) : 0.0f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = 4 * lane + 128 * c;
          row[b][c] = i < live.hi && d < hd ? load_row4(po + static_cast<int64_t>(i) * hd + d, aligned)
                                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        if (w[b] == 0.0f) continue;  // also keeps an unwritten row's NaN out of the sum
        l += w[b];
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          o[c].x += w[b] * row[b][c].x;
          o[c].y += w[b] * row[b][c].y;
          o[c].z += w[b] * row[b][c].z;
          o[c].w += w[b] * row[b][c].w;
        }
      }
    }
  }
  if (lane == 0) warp_l[warp] = l;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = 4 * lane + 128 * c;
    if (d < hd) *reinterpret_cast<float4*>(&warp_o[warp][d]) = o[c];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += WARPS * 32) {
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        num += warp_o[w][d];
        den += warp_l[w];
      }
      if (sink != -INFINITY) den += expf(sink - mx);
    }
    static_cast<bf16*>(a.out)[(token * a.num_heads + h) * hd + d] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
}

}  // namespace

// KVASIR_CUDA_ATTN (cuda_tuning.h) forces one kernel for every batch (the op tests use them).
// Unset: the all-heads plan wherever its shape allows, run by mma_bulk from kMmaBulkMinSeqs decode
// sequences where mma_bulk's shape allows (at batch 256 x 1,024-token contexts mma_bulk took 0.30
// ms per layer against all_heads' 0.40: 3.6 vs 2.7 TB/s of KV), else by all_heads; but below
// kMmaBulkMinSeqs, where the all-heads plan would launch fewer CTAs than the GPU has SMs (its
// splits are at least 32 tokens of every kv head), the per-head phased plan (ncu, batch 1 at 144
// tokens: all_heads on 5 CTAs 16.0 us + combine 3.9, per_head_phased on 80 CTAs 7.4 + 5.1; H200,
// 2026-11-29; these were "v3" and "v1" then).
DecodeAttentionKernel decode_kernel_choice() { return kernel_tuning().decode_attention; }

bool all_heads_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  const DecodeAttentionKernel forced = decode_kernel_choice();
  if (forced == DecodeAttentionKernel::kPerHeadPhased || forced == DecodeAttentionKernel::kPerHeadOnline) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (num_kv_heads != 1 && num_kv_heads != 2 && num_kv_heads != 4 && num_kv_heads != 8) return false;
  const int group = num_heads / num_kv_heads;
  return group >= 1 && group <= 8 && num_heads % num_kv_heads == 0;
}

void launch_decode_combine(const AttentionArgs& a, const int32_t* decode_seqs, int nd, int num_splits, int part_tokens,
                           const float* partial, cudaStream_t s) {
  static_assert(kCombineMaxDims == 256, "two float4 chunks a lane at most");
  if (num_splits >= kCombineManySplits && a.head_dim <= 128) {
    launch(decode_combine_kernel<16, 16, 1>, dim3(a.num_heads, nd), 16 * 32, 0, s, a, decode_seqs, nd, num_splits,
           part_tokens, partial);
  } else if (num_splits >= kCombineManySplits) {
    launch(decode_combine_kernel<16, 4, 2>, dim3(a.num_heads, nd), 16 * 32, 0, s, a, decode_seqs, nd, num_splits,
           part_tokens, partial);
  } else {
    launch(decode_combine_kernel<4, 4, 2>, dim3(a.num_heads, nd), 4 * 32, 0, s, a, decode_seqs, nd, num_splits,
           part_tokens, partial);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void init_decode_attention_kernels() {
  init_decode_all_heads_kernels();
  init_decode_mma_bulk_kernels();
}

// A/B knobs for the all-heads split plan (cuda_tuning.h): KVASIR_CUDA_V3_CTAS (CTAs per SM aimed
// for, default 4) and KVASIR_CUDA_V3_PART (largest split in tokens, default kMaxPartition).

namespace {

// The plan without regard to sinks; plan_decode_split adds the combine sinks need.
DecodeSplit plan_decode_split_keys(int num_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                                   int max_blocks_per_seq, int block_size, int num_sms) {
  const int all_heads_ctas = kernel_tuning().all_heads_ctas_per_sm;
  const int all_heads_part = kernel_tuning().all_heads_max_partition;
  // KVASIR_CUDA_V3_MIN_CTAS: below kMmaBulkMinSeqs decode sequences, fewer all-heads CTAs than this
  // (default: one per SM) run the per-head plan instead; 0 keeps all-heads (the plan of ba094b2).
  const int all_heads_min_ctas = kernel_tuning().all_heads_min_ctas;
  DecodeSplit sp;
  const int capacity = std::max(1, max_blocks_per_seq * block_size);
  // The per-head kernels only when forced or where the all-heads shape does not fit.
  if (all_heads_shape_ok(num_heads, num_kv_heads, head_dim)) {
    // One CTA per (split, sequence), two resident per SM: aim for KVASIR_CUDA_V3_CTAS (2) CTAs per
    // SM, one wave. Four balanced ragged batches when splits were cut at plan multiples; with splits
    // cut from each context (split_keys) two won (H200, Llama-8B shape: batch 1 at 32k 6.10 vs
    // 6.69 ms/token, batch 8 at 8k 13.40 vs 13.6, batch 256 at 1k 21.3-21.4 both; one: 7.68).
    // Splits are multiples of 32 tokens (every all-heads tile divides 32).
    sp.all_heads = true;
    const int base = std::max(1, num_decode_seqs);
    const int wanted = std::max(1, (all_heads_ctas * num_sms + base - 1) / base);
    int part = (capacity + wanted - 1) / wanted;
    part = std::min(all_heads_part, std::max(32, ((part + 31) / 32) * 32));
    sp.partition_tokens = part;
    sp.num_splits = (capacity + part - 1) / part;
    const int min_ctas = all_heads_min_ctas < 0 ? num_sms : all_heads_min_ctas;
    const bool starved = decode_kernel_choice() == DecodeAttentionKernel::kAuto && num_decode_seqs < kMmaBulkMinSeqs &&
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

}  // namespace

// Sinks leave the decode kernels as they are tuned: an unsplit plan gets one more, empty split, so
// its result goes through the partials and the combine adds the sink there.
DecodeSplit plan_decode_split(int num_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                              int max_blocks_per_seq, int block_size, int num_sms, bool sinks) {
  DecodeSplit sp = plan_decode_split_keys(num_decode_seqs, num_heads, num_kv_heads, head_dim, max_blocks_per_seq,
                                          block_size, num_sms);
  if (sinks) sp.num_splits = std::max(sp.num_splits, 2);
  return sp;
}

int64_t decode_scratch_floats(int num_decode_seqs, int num_heads, int head_dim, const DecodeSplit& split) {
  if (split.num_splits <= 1) return 0;
  return static_cast<int64_t>(num_decode_seqs) * num_heads * split.num_splits * (head_dim + 2);
}

void launch_decode_attention(const AttentionArgs& args, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                             float* partial, cudaStream_t s) {
  if (nd <= 0) return;
  AttentionArgs a = args;
  a.splits_by_context = kernel_tuning().splits_by_context;
  if (sp.all_heads) {
    KVASIR_CHECK_MSG(all_heads_shape_ok(a.num_heads, a.num_kv_heads, a.head_dim), "attention: split planned for all_heads");
    const DecodeAttentionKernel forced = decode_kernel_choice();
    // An FP8 cache takes mma_bulk at every batch the all-heads plan serves: all_heads widens codes on
    // CUDA cores, mma_bulk for the tensor cores (H100, batch 1 at 32k, FP8 weights: 4.64 ms a step
    // against 5.16; BENCHMARKS.md 2026-12-06).
    const bool mma_bulk = forced == DecodeAttentionKernel::kMmaBulk ||
                          (forced == DecodeAttentionKernel::kAuto &&
                           (nd >= kMmaBulkMinSeqs || a.kv_cache != KvCacheType::kBf16));
    if (mma_bulk && mma_bulk_shape_ok(a.num_heads, a.num_kv_heads, a.head_dim)) {
      launch_decode_mma_bulk(a, decode_seqs, nd, sp, partial, s);
    } else {
      launch_decode_all_heads(a, decode_seqs, nd, sp, partial, s);
    }
  } else {
    launch_decode_per_head(a, decode_seqs, nd, sp, partial, s);
  }
  if (sp.num_splits > 1) launch_decode_combine(a, decode_seqs, nd, sp.num_splits, sp.partition_tokens, partial, s);
}

}  // namespace kvasir::cuda
