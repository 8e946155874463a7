// DeepSeek multi-head latent attention (MLA) on the GPU, the kernels behind CudaBackend's
// write_latent_kv and mla_attention (cuda_mla_ops.cpp plans them). The cache holds one bf16 row
// [c_kv | rope(k_pe)] per token, shared by every query head (MQA), so a CTA takes many (token,
// head) rows at once and reads each latent row once for all of them, as FlashMLA does:
//   scores(r, j) = q_latent[r] . row_j * scale      (float32 q_latent: [W_UK^T q_nope | rope(q_pe)])
//   o_latent[r]  = softmax_j(scores) . c_kv_j        (online softmax over chunks of kMlaKeys keys)
// Decode splits a sequence's keys over CTAs (flash-decoding) and mla_combine_kernel merges them;
// a split's key range comes from counts only, so a captured decode graph stays valid as the
// sequences grow. Everything accumulates in float32 and the work of each output is fixed by the
// plan, so results are deterministic. Scores and values run on the CUDA cores; the tensor-core
// version (FlashMLA's wgmma) is a later step.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mla_kernels.h"

namespace kvasir::cuda {
namespace {

__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// One RoPE angle: the same operations as elementwise.cu's rope_pair, so the cache's k_pe and the
// query's rope part rotate exactly as the GQA path's keys do.
__device__ __forceinline__ void rope_cos_sin(float pos, float inv_freq, float attention_factor, float& c, float& s) {
  const float theta = pos * inv_freq;
  sincosf(theta, &s, &c);
  c *= attention_factor;
  s *= attention_factor;
}

__global__ void write_latent_kv_kernel(const bf16* __restrict__ c_kv, const bf16* __restrict__ k_pe,
                                       bf16* __restrict__ cache, const int32_t* __restrict__ positions,
                                       const float* __restrict__ inv_freq, const int64_t* __restrict__ slot_mapping,
                                       int L, int R, bool neox, float attention_factor, int64_t num_slots) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;  // padding token (the host checked the upper bound)
  bf16* dst = cache + slot * (L + R);
  const bf16* src = c_kv + t * L;
  for (int i = threadIdx.x; i < L; i += blockDim.x) dst[i] = src[i];
  const bf16* pe = k_pe + t * R;
  const float pos = static_cast<float>(positions[t]);
  const int half = R / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float c, s;
    rope_cos_sin(pos, inv_freq[j], attention_factor, c, s);
    const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    const float a = to_f(pe[i0]), b = to_f(pe[i1]);
    dst[L + i0] = __float2bfloat16_rn(a * c - b * s);
    dst[L + i1] = __float2bfloat16_rn(b * c + a * s);
  }
}

__global__ void mla_q_rope_kernel(const bf16* __restrict__ q, float* __restrict__ q_latent,
                                  const int32_t* __restrict__ positions, const float* __restrict__ inv_freq, int H,
                                  int nope, int R, int L, bool neox, float attention_factor) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  const int half = R / 2, D = L + R;
  for (int i = threadIdx.x; i < H * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    const bf16* src = q + (t * H + h) * (nope + R) + nope;
    float* dst = q_latent + (t * H + h) * D + L;
    float c, s;
    rope_cos_sin(pos, inv_freq[j], attention_factor, c, s);
    const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    const float a = to_f(src[i0]), b = to_f(src[i1]);
    dst[i0] = a * c - b * s;
    dst[i1] = b * c + a * s;
  }
}

// A warp per (h, m): lanes stride over k, each token's dot is reduced across the warp.
template <typename TX, typename TO>
__global__ void head_gemv_kernel(const TX* __restrict__ x, int64_t x_ts, int64_t x_hs, const bf16* __restrict__ w,
                                 TO* __restrict__ out, int64_t o_ts, int64_t o_hs, int n, int M, int K) {
  pdl_begin();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, m = blockIdx.x * (blockDim.x >> 5) + warp;
  const int t0 = blockIdx.z * kMlaGemvTokens;
  if (m >= M) return;
  const int nt = min(kMlaGemvTokens, n - t0);
  const bf16* wr = w + (static_cast<int64_t>(h) * M + m) * K;
  const TX* xh = x + static_cast<int64_t>(t0) * x_ts + static_cast<int64_t>(h) * x_hs;
  float acc[kMlaGemvTokens];
#pragma unroll
  for (int i = 0; i < kMlaGemvTokens; ++i) acc[i] = 0.0f;
  for (int k = lane; k < K; k += 32) {
    const float wv = to_f(wr[k]);
#pragma unroll
    for (int i = 0; i < kMlaGemvTokens; ++i) {
      if (i < nt) acc[i] += wv * to_f(xh[i * x_ts + k]);
    }
  }
#pragma unroll
  for (int i = 0; i < kMlaGemvTokens; ++i) {
    if (i < nt) {  // nt is the same for the whole warp
      const float v = warp_sum(acc[i]);
      if (lane == 0) store(out + static_cast<int64_t>(t0 + i) * o_ts + static_cast<int64_t>(h) * o_hs + m, v);
    }
  }
}

// Padded widths: a latent row of D = L + R values is held as Dp (a multiple of 8) columns,
// zeros past D, and the key rows in shared memory are Dp + 8 apart so the 16-byte reads of
// neighbouring lanes fall in different banks.
__host__ __device__ __forceinline__ int padded8(int d) { return (d + 7) / 8 * 8; }

__global__ void __launch_bounds__(kMlaThreads) mla_attention_kernel(MlaAttentionArgs a) {
  pdl_begin();
  extern __shared__ float4 mla_smem[];
  const int H = a.H, L = a.L, D = a.L + a.R, Dp = padded8(D), Dk = Dp + 8;
  float* q_s = reinterpret_cast<float*>(mla_smem);              // [kMlaRows, Dp]
  bf16* k_s = reinterpret_cast<bf16*>(q_s + kMlaRows * Dp);     // [kMlaKeys, Dk]
  float* p_s = reinterpret_cast<float*>(k_s + kMlaKeys * Dk);   // [kMlaRows, kMlaKeys]
  __shared__ float m_s[kMlaRows], l_s[kMlaRows], alpha_s[kMlaRows];
  __shared__ int ctx_s[kMlaRows];
  __shared__ int64_t slot_s[kMlaKeys];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const PrefillWork wk = a.work[blockIdx.x];
  const int seq = wk.seq;
  const int q0 = a.query_start_loc[seq], q1 = a.query_start_loc[seq + 1];
  const int first_pos = a.seq_lens[seq] - (q1 - q0);  // position of the sequence's first query
  const int HG = a.heads_per_group, h0 = blockIdx.y * HG;
  const int tq_n = min(a.tokens_per_tile, q1 - wk.q_begin);
  const int hg_n = min(HG, H - h0);
  const int rows = a.tokens_per_tile * HG;  // row r: token wk.q_begin + r / HG, head h0 + r % HG
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int tile_pos = first_pos + (wk.q_begin - q0);  // position of the tile's first token

  if (tid < kMlaRows) {
    const int tq = tid / HG, hg = tid % HG;
    const bool valid = tid < rows && tq < tq_n && hg < hg_n;
    ctx_s[tid] = valid ? tile_pos + tq + 1 : 0;  // causal: keys [0, own position]
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  for (int i = tid; i < kMlaRows * Dp; i += kMlaThreads) {
    const int r = i / Dp, d = i % Dp;
    const int tq = r / HG, hg = r % HG;
    float v = 0.0f;
    if (r < rows && tq < tq_n && hg < hg_n && d < D) {
      v = a.q_latent[((static_cast<int64_t>(wk.q_begin) + tq) * H + h0 + hg) * D + d];
    }
    q_s[i] = v;
  }
  // This split's keys: all the tile needs, or one partition of them.
  const int kmax = tile_pos + tq_n;
  int k0 = 0, k1 = kmax;
  if (a.num_splits > 1) {
    k0 = blockIdx.z * a.partition_tokens;
    k1 = min(kmax, k0 + a.partition_tokens);
  }

  const int CG = (L + 7) / 8;  // groups of 8 latent columns
  const int items = rows * CG;
  float acc[kMlaMaxItems][8];
#pragma unroll
  for (int k = 0; k < kMlaMaxItems; ++k) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[k][e] = 0.0f;
  }
  const bf16* cache = static_cast<const bf16*>(a.cache);

  for (int kb = k0; kb < k1; kb += kMlaKeys) {
    const int nk = min(kMlaKeys, k1 - kb);
    __syncthreads();  // the previous pass is done with k_s, p_s and slot_s (and q_s/ctx_s are written)
    if (tid < nk) slot_s[tid] = slot_of(table, kb + tid, a.block_size);
    __syncthreads();
    if ((D & 7) == 0) {
      const int vpr = D / 8;
      for (int i = tid; i < nk * vpr; i += kMlaThreads) {
        const int j = i / vpr, v = i % vpr;
        *reinterpret_cast<uint4*>(k_s + j * Dk + v * 8) =
            *reinterpret_cast<const uint4*>(cache + slot_s[j] * D + v * 8);
      }
    } else {
      for (int i = tid; i < nk * Dp; i += kMlaThreads) {
        const int j = i / Dp, d = i % Dp;
        k_s[j * Dk + d] = d < D ? cache[slot_s[j] * D + d] : __float2bfloat16_rn(0.0f);
      }
    }
    __syncthreads();
    // Scores: a warp per row, a lane per key; then the row's online-softmax update.
    for (int r = warp; r < rows; r += kMlaThreads / 32) {
      float sc = -INFINITY;
      if (lane < nk && kb + lane < ctx_s[r]) {
        const float* qr = q_s + r * Dp;
        const bf16* kr = k_s + lane * Dk;
        float dot = 0.0f;
        for (int d = 0; d < Dp; d += 8) {
          float kv[8];
          load8(kr + d, kv);
          const float4 qa = *reinterpret_cast<const float4*>(qr + d);
          const float4 qb = *reinterpret_cast<const float4*>(qr + d + 4);
          dot += qa.x * kv[0] + qa.y * kv[1] + qa.z * kv[2] + qa.w * kv[3] + qb.x * kv[4] + qb.y * kv[5] +
                 qb.z * kv[6] + qb.w * kv[7];
        }
        sc = dot * a.scale;
      }
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(sc));
      float p = 0.0f, alpha = 1.0f;
      if (m_new != -INFINITY) {  // else no key of this row so far: nothing to add, nothing to rescale
        p = expf(sc - m_new);
        alpha = expf(m_old - m_new);
      }
      const float psum = warp_sum(p);
      p_s[r * kMlaKeys + lane] = p;
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + psum;
        alpha_s[r] = alpha;
      }
    }
    __syncthreads();
    // Values: each thread owns up to kMlaMaxItems (row, 8 columns) accumulators.
#pragma unroll
    for (int k = 0; k < kMlaMaxItems; ++k) {
      const int it = tid + k * kMlaThreads;
      if (it < items) {
        const int r = it / CG, c = it % CG;
        const float al = alpha_s[r];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[k][e] *= al;
        const float* pr = p_s + r * kMlaKeys;
        const bf16* kc = k_s + c * 8;
        for (int j = 0; j < nk; ++j) {
          const float p = pr[j];
          float kv[8];
          load8(kc + j * Dk, kv);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[k][e] += p * kv[e];
        }
      }
    }
  }
  __syncthreads();  // m_s / l_s final (a split with no keys never entered the loop)

#pragma unroll
  for (int k = 0; k < kMlaMaxItems; ++k) {
    const int it = tid + k * kMlaThreads;
    if (it >= items) continue;
    const int r = it / CG, c = it % CG;
    const int tq = r / HG, hg = r % HG;
    if (tq >= tq_n || hg >= hg_n) continue;
    const int64_t token = wk.q_begin + tq;
    const int h = h0 + hg;
    if (a.num_splits == 1) {
      const float l = l_s[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      bf16* o = static_cast<bf16*>(a.o_latent) + (token * H + h) * L;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (c * 8 + e < L) o[c * 8 + e] = __float2bfloat16_rn(acc[k][e] * inv);
      }
    } else {
      float* part = a.partial + ((static_cast<int64_t>(blockIdx.x) * H + h) * a.num_splits + blockIdx.z) * (L + 2);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (c * 8 + e < L) part[c * 8 + e] = acc[k][e];
      }
      if (c == 0) {
        part[L] = m_s[r];
        part[L + 1] = l_s[r];
      }
    }
  }
}

// Merges a decode token's splits, per head, in split order.
__global__ void mla_combine_kernel(MlaAttentionArgs a) {
  pdl_begin();
  const int w = blockIdx.x, h = blockIdx.y, L = a.L, S = a.num_splits;
  const int64_t token = a.work[w].q_begin;
  const float* part = a.partial + (static_cast<int64_t>(w) * a.H + h) * S * (L + 2);
  float mx = -INFINITY;
  for (int i = 0; i < S; ++i) mx = fmaxf(mx, part[i * (L + 2) + L]);
  bf16* o = static_cast<bf16*>(a.o_latent) + (token * a.H + h) * L;
  for (int col = threadIdx.x; col < L; col += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
      for (int i = 0; i < S; ++i) {
        const float m = part[i * (L + 2) + L];
        if (m == -INFINITY) continue;  // a split past the context
        const float wgt = expf(m - mx);
        num += wgt * part[i * (L + 2) + col];
        den += wgt * part[i * (L + 2) + L + 1];
      }
    }
    o[col] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
}

}  // namespace

void launch_write_latent_kv(const void* c_kv, const void* k_pe, void* cache, const int32_t* positions,
                            const float* inv_freq, const int64_t* slot_mapping, int n, int L, int R, bool neox,
                            float attention_factor, int64_t num_slots, cudaStream_t s) {
  if (n <= 0) return;
  launch(write_latent_kv_kernel, dim3(n), dim3(128), 0, s, static_cast<const bf16*>(c_kv),
         static_cast<const bf16*>(k_pe), static_cast<bf16*>(cache), positions, inv_freq, slot_mapping, L, R, neox,
         attention_factor, num_slots);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_mla_q_rope(const void* q, float* q_latent, const int32_t* positions, const float* inv_freq, int n,
                       int H, int nope, int R, int L, bool neox, float attention_factor, cudaStream_t s) {
  if (n <= 0) return;
  launch(mla_q_rope_kernel, dim3(n), dim3(256), 0, s, static_cast<const bf16*>(q), q_latent, positions, inv_freq,
         H, nope, R, L, neox, attention_factor);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_head_gemv(const void* x, bool x_f32, int64_t x_ts, int64_t x_hs, const void* w, void* out, bool out_f32,
                      int64_t o_ts, int64_t o_hs, int n, int H, int M, int K, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int kWarps = 8;
  const dim3 grid((M + kWarps - 1) / kWarps, H, (n + kMlaGemvTokens - 1) / kMlaGemvTokens);
  const bf16* wb = static_cast<const bf16*>(w);
  if (x_f32 && out_f32) {
    launch(head_gemv_kernel<float, float>, grid, dim3(32 * kWarps), 0, s, static_cast<const float*>(x), x_ts, x_hs,
           wb, static_cast<float*>(out), o_ts, o_hs, n, M, K);
  } else if (x_f32) {
    launch(head_gemv_kernel<float, bf16>, grid, dim3(32 * kWarps), 0, s, static_cast<const float*>(x), x_ts, x_hs,
           wb, static_cast<bf16*>(out), o_ts, o_hs, n, M, K);
  } else if (out_f32) {
    launch(head_gemv_kernel<bf16, float>, grid, dim3(32 * kWarps), 0, s, static_cast<const bf16*>(x), x_ts, x_hs,
           wb, static_cast<float*>(out), o_ts, o_hs, n, M, K);
  } else {
    launch(head_gemv_kernel<bf16, bf16>, grid, dim3(32 * kWarps), 0, s, static_cast<const bf16*>(x), x_ts, x_hs,
           wb, static_cast<bf16*>(out), o_ts, o_hs, n, M, K);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

size_t mla_attention_smem_bytes(int L, int R) {
  const int Dp = padded8(L + R);
  const size_t bytes = static_cast<size_t>(kMlaRows) * Dp * 4 + static_cast<size_t>(kMlaKeys) * (Dp + 8) * 2 +
                       static_cast<size_t>(kMlaRows) * kMlaKeys * 4;
  // What init_mla_kernels allows (the H200 grants 227 KiB per block).
  return bytes <= size_t{200} * 1024 ? bytes : 0;
}

void init_mla_kernels() {
  // 200 KiB, or what this device grants a block (less on pre-Hopper parts: the wide shapes are
  // then refused by the launch check rather than by this call).
  int device = 0, optin = 0;
  KVASIR_CUDA_CHECK(cudaGetDevice(&device));
  KVASIR_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int static_bytes = 1024;  // m_s, l_s, alpha_s, ctx_s, slot_s
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        std::min(200 * 1024, optin - static_bytes)));
}

void launch_mla_attention(const MlaAttentionArgs& a, cudaStream_t s) {
  if (a.num_work <= 0) return;
  const size_t smem = mla_attention_smem_bytes(a.L, a.R);
  const int groups = (a.H + a.heads_per_group - 1) / a.heads_per_group;
  launch(mla_attention_kernel, dim3(a.num_work, groups, a.num_splits), dim3(kMlaThreads), smem, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
  if (a.num_splits > 1) {
    launch(mla_combine_kernel, dim3(a.num_work, a.H), dim3(128), 0, s, a);
    KVASIR_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace kvasir::cuda
