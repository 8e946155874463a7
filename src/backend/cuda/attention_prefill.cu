// Paged attention for prefill and mixed batches: tiles of query rows (tokens x heads of one kv
// head) on the tensor cores (mma.sync m16n8k16 bf16, float32 accumulators) with an online softmax
// over key tiles staged in shared memory; causal by position, optional sliding window and logit
// soft-capping, optional attention sinks. Work items (sequence, first query of a tile) come from the host.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Prefill / mixed on the tensor cores. A CTA: 4 warps, 64 query rows (16 per warp); row r is
// token r / hc of the tile and head r % hc of the kv head's group chunk.
constexpr int kPrefillThreads = 128;
constexpr int kTileRows = 64;
constexpr int kKeyTile = 64;

template <int HD>
constexpr int prefill_smem_bytes() {
  return 3 * kTileRows * (HD + 8) * 2;  // Q, K, V tiles, rows padded by 16 bytes (no bank conflicts)
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_bf16_raw(bf16 lo, bf16 hi) {
  __nv_bfloat162 v;
  v.x = lo;
  v.y = hi;
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int HD>
__global__ void __launch_bounds__(kPrefillThreads) prefill_kernel(AttentionArgs a, const PrefillWork* __restrict__ work,
                                                                 int heads_per_cta, int num_chunks) {
  pdl_begin();
  constexpr int kStride = HD + 8;  // bf16 elements per smem row
  constexpr int kKc = HD / 16;     // k-steps over the head dim
  constexpr int kDn = HD / 8;      // n-tiles of the output
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* ks = qs + kTileRows * kStride;
  bf16* vs = ks + kKeyTile * kStride;

  const PrefillWork wi = work[blockIdx.x];
  const int kvh = blockIdx.y / num_chunks, chunk = blockIdx.y % num_chunks;
  const int group = a.num_heads / a.num_kv_heads;
  const int hc = heads_per_cta;
  const int g0 = chunk * hc;
  const int ng = min(hc, group - g0);
  const int tq = kTileRows / hc;  // tokens in the tile
  const int s = wi.seq;
  const int q_seq_begin = a.query_start_loc[s], q_seq_end = a.query_start_loc[s + 1];
  const int seq_len = a.seq_lens[s];
  const int first_pos = seq_len - (q_seq_end - q_seq_begin);
  const int q_begin = wi.q_begin;
  const int q_end = min(q_seq_end, q_begin + tq);
  const int pos_first = first_pos + (q_begin - q_seq_begin);
  const int pos_last = first_pos + (q_end - 1 - q_seq_begin);
  const int k_lo = a.sliding_window > 0 ? max(0, pos_first - a.sliding_window + 1) : 0;
  const int k_hi = pos_last + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int num_heads = a.num_heads, kv_heads = a.num_kv_heads;
  const bf16* q = static_cast<const bf16*>(a.q);
  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);

  // Stage Q (zeros for rows past the tile).
  for (int i = threadIdx.x; i < kTileRows * (HD / 8); i += kPrefillThreads) {
    const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
    const int t = q_begin + r / hc, g = r % hc;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r / hc < tq && t < q_end && g < ng) {
      v = *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(t) * num_heads + kvh * group + g0 + g) * HD + c);
    }
    *reinterpret_cast<uint4*>(qs + r * kStride + c) = v;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int row0 = warp * 16 + gid, row1 = row0 + 8;  // the two rows this thread's fragments touch
  auto row_pos = [&](int r) -> int {  // -1: padding row
    const int t = q_begin + r / hc;
    return (r / hc < tq && t < q_end && (r % hc) < ng) ? first_pos + (t - q_seq_begin) : -1;
  };
  const int p0 = row_pos(row0), p1 = row_pos(row1);
  const int lo0 = a.sliding_window > 0 ? p0 - a.sliding_window + 1 : 0;
  const int lo1 = a.sliding_window > 0 ? p1 - a.sliding_window + 1 : 0;

  uint32_t qa[kKc][4];
#pragma unroll
  for (int kk = 0; kk < kKc; ++kk) {
    const bf16* base = qs + (warp * 16) * kStride + kk * 16 + tig * 2;
    qa[kk][0] = *reinterpret_cast<const uint32_t*>(base + gid * kStride);
    qa[kk][1] = *reinterpret_cast<const uint32_t*>(base + (gid + 8) * kStride);
    qa[kk][2] = *reinterpret_cast<const uint32_t*>(base + gid * kStride + 8);
    qa[kk][3] = *reinterpret_cast<const uint32_t*>(base + (gid + 8) * kStride + 8);
  }

  float acc[kDn][4];
#pragma unroll
  for (int dn = 0; dn < kDn; ++dn) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[dn][c] = 0.0f;
  }
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int kt0 = k_lo; kt0 < k_hi; kt0 += kKeyTile) {
    __syncthreads();  // the previous tile's K/V are no longer read
    for (int i = threadIdx.x; i < kKeyTile * (HD / 8); i += kPrefillThreads) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
      const int j = kt0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (j < k_hi) {
        const int64_t off = (slot_of(table, j, a.block_size) * kv_heads + kvh) * HD + c;
        kv = *reinterpret_cast<const uint4*>(kc + off);
        vv = *reinterpret_cast<const uint4*>(vc + off);
      }
      *reinterpret_cast<uint4*>(ks + r * kStride + c) = kv;
      *reinterpret_cast<uint4*>(vs + r * kStride + c) = vv;
    }
    __syncthreads();

    float sc[kKeyTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) sc[nt][c] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKc; ++kk) {
        const bf16* kb = ks + (nt * 8 + gid) * kStride + kk * 16 + tig * 2;
        mma_bf16(sc[nt], qa[kk], *reinterpret_cast<const uint32_t*>(kb), *reinterpret_cast<const uint32_t*>(kb + 8));
      }
    }
    // Scale, cap, mask; row maxima over the quad that shares a row.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = kt0 + nt * 8 + tig * 2 + (c & 1);
        const int p = c < 2 ? p0 : p1;
        const int lo = c < 2 ? lo0 : lo1;
        float v = sc[nt][c] * a.scale;
        if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
        if (p < 0 || j > p || j < lo) v = -INFINITY;
        sc[nt][c] = v;
        if (c < 2) mx0 = fmaxf(mx0, v);
        else mx1 = fmaxf(mx1, v);
      }
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = expf(m0 - base0), alpha1 = expf(m1 - base1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kKeyTile / 8; ++nt) {
      sc[nt][0] = expf(sc[nt][0] - base0);
      sc[nt][1] = expf(sc[nt][1] - base0);
      sc[nt][2] = expf(sc[nt][2] - base1);
      sc[nt][3] = expf(sc[nt][3] - base1);
      sum0 += sc[nt][0] + sc[nt][1];
      sum1 += sc[nt][2] + sc[nt][3];
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, o);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, o);
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int dn = 0; dn < kDn; ++dn) {
      acc[dn][0] *= alpha0;
      acc[dn][1] *= alpha0;
      acc[dn][2] *= alpha1;
      acc[dn][3] *= alpha1;
    }
    // O += P V: two adjacent score n-tiles form one A fragment over 16 keys.
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
      pa[1] = pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
      pa[2] = pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[3] = pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
      const bf16* vb = vs + (kk * 16 + tig * 2) * kStride + gid;
#pragma unroll
      for (int dn = 0; dn < kDn; ++dn) {
        const bf16* v0 = vb + dn * 8;
        const uint32_t b0 = pack_bf16_raw(v0[0], v0[kStride]);
        const uint32_t b1 = pack_bf16_raw(v0[8 * kStride], v0[9 * kStride]);
        mma_bf16(acc[dn], pa, b0, b1);
      }
    }
  }

  // An attention sink is one more logit of the head's softmax with no value: it only adds to the
  // denominator (every live row saw at least its own key, so m is finite).
  if (a.sinks != nullptr) {
    if (p0 >= 0) l0 += expf(a.sinks[kvh * group + g0 + row0 % hc] - m0);
    if (p1 >= 0) l1 += expf(a.sinks[kvh * group + g0 + row1 % hc] - m1);
  }

  // Write the two rows this thread holds.
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  bf16* out = static_cast<bf16*>(a.out);
  if (p0 >= 0) {
    const int t = q_begin + row0 / hc, h = kvh * group + g0 + row0 % hc;
    bf16* o = out + (static_cast<int64_t>(t) * num_heads + h) * HD + tig * 2;
#pragma unroll
    for (int dn = 0; dn < kDn; ++dn) {
      *reinterpret_cast<__nv_bfloat162*>(o + dn * 8) = __floats2bfloat162_rn(acc[dn][0] * inv0, acc[dn][1] * inv0);
    }
  }
  if (p1 >= 0) {
    const int t = q_begin + row1 / hc, h = kvh * group + g0 + row1 % hc;
    bf16* o = out + (static_cast<int64_t>(t) * num_heads + h) * HD + tig * 2;
#pragma unroll
    for (int dn = 0; dn < kDn; ++dn) {
      *reinterpret_cast<__nv_bfloat162*>(o + dn * 8) = __floats2bfloat162_rn(acc[dn][2] * inv1, acc[dn][3] * inv1);
    }
  }
}

int heads_per_cta(int num_heads, int num_kv_heads) { return std::min(num_heads / num_kv_heads, 8); }

template <int HD>
void launch_prefill_hd(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  const int hc = heads_per_cta(a.num_heads, a.num_kv_heads);
  const int chunks = (group + hc - 1) / hc;
  dim3 grid(num_work, a.num_kv_heads * chunks);
  launch(prefill_kernel<HD>, grid, kPrefillThreads, prefill_smem_bytes<HD>(), s, a, work, hc, chunks);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <int HD>
void set_smem_limits() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         prefill_smem_bytes<HD>()));
}

}  // namespace

void init_attention_kernels() {
  set_smem_limits<64>();
  set_smem_limits<128>();
  set_smem_limits<256>();
  init_decode_attention_kernels();
}

int prefill_tokens_per_tile(int num_heads, int num_kv_heads) {
  return kTileRows / heads_per_cta(num_heads, num_kv_heads);
}

void launch_prefill_attention(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s) {
  if (num_work <= 0) return;
  switch (a.head_dim) {
    case 64: launch_prefill_hd<64>(a, work, num_work, s); break;
    case 128: launch_prefill_hd<128>(a, work, num_work, s); break;
    case 256: launch_prefill_hd<256>(a, work, num_work, s); break;
    default: KVASIR_CHECK_MSG(false, "attention: unsupported head_dim");
  }
}

}  // namespace kvasir::cuda
