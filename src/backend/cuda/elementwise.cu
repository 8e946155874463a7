// The backend's small kernels: embedding, RMSNorm (plain and fused with the residual add), add,
// RoPE, KV-cache writes, gated activations, soft-capping, row gathers, bias, conversions and the
// random fill behind --load-format dummy. All memory-bound: 16-byte accesses where rows allow,
// float32 arithmetic, one rounding to bf16 per stored value.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_cache_codes.cuh"

namespace kvasir::cuda {
namespace {

__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 to_b(float v) { return __float2bfloat16_rn(v); }

template <bool kVec>
__global__ void embedding_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids,
                                 const int32_t* __restrict__ sources, const int32_t* __restrict__ fed, int64_t d,
                                 int64_t vocab, float scale, bf16* __restrict__ out) {
  pdl_begin();
  const int64_t row = blockIdx.x;
  const int32_t from = sources != nullptr ? sources[row] : -1;
  int64_t id = from >= 0 ? fed[from] : ids[row];
  if (id < 0 || id >= vocab) id = 0;  // the model validated ids; never read outside the table
  const bf16* src = table + id * d;
  bf16* dst = out + row * d;
  if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < d; j += blockDim.x * 8) {
      float v[8];
      load8(src + j, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] *= scale;
      store8(dst + j, v);
    }
  } else {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dst[j] = to_b(to_f(src[j]) * scale);
  }
}

template <bool kVec>
__global__ void rms_norm_kernel(const bf16* x, const float* __restrict__ w, float eps, int64_t d, bf16* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const bf16* xr = x + blockIdx.x * d;
  bf16* orow = out + blockIdx.x * d;
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < d; j += blockDim.x * 8) {
      float v[8];
      load8(xr + j, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
    }
  } else {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += to_f(xr[j]) * to_f(xr[j]);
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < d; j += blockDim.x * 8) {
      float v[8];
      load8(xr + j, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = v[i] * inv * w[j + i];
      store8(orow + j, v);
    }
  } else {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) orow[j] = to_b(to_f(xr[j]) * inv * w[j]);
  }
}

// residual = bf16(residual + x); out = rms_norm(residual). Each thread re-reads only what it wrote.
// When each thread owns exactly one 8-wide chunk (d = 8 x threads: 4096 on 512 threads), the
// norm's weights are read before the wait for the previous kernel (no kernel writes them) and the
// sum stays in registers for the second pass instead of a re-read of the residual.
template <bool kVec>
__global__ void add_rms_norm_kernel(bf16* residual, const bf16* __restrict__ x, const float* __restrict__ w, float eps,
                                    int64_t d, bf16* __restrict__ out) {
  __shared__ float scratch[32];
  bf16* rr = residual + blockIdx.x * d;
  const bf16* xr = x + blockIdx.x * d;
  bf16* orow = out + blockIdx.x * d;
  if (kVec && d == int64_t{blockDim.x} * 8) {
    pdl_launch_dependents();
    const int64_t j = threadIdx.x * 8;
    float wf[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) wf[i] = w[j + i];
    pdl_wait();
    float a[8], b[8];
    load8(rr + j, a);
    load8(xr + j, b);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      a[i] = to_f(to_b(a[i] + b[i]));
      ss += a[i] * a[i];
    }
    store8(rr + j, a);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = a[i] * inv * wf[i];
    store8(orow + j, a);
    return;
  }
  pdl_begin();
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < d; j += blockDim.x * 8) {
      float a[8], b[8];
      load8(rr + j, a);
      load8(xr + j, b);
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = to_f(to_b(a[i] + b[i]));
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += a[i] * a[i];
      store8(rr + j, a);
    }
  } else {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float s = to_f(to_b(to_f(rr[j]) + to_f(xr[j])));
      rr[j] = to_b(s);
      ss += s * s;
    }
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < d; j += blockDim.x * 8) {
      float v[8];
      load8(rr + j, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = v[i] * inv * w[j + i];
      store8(orow + j, v);
    }
  } else {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) orow[j] = to_b(to_f(rr[j]) * inv * w[j]);
  }
}

__global__ void add_bf16_kernel(bf16* a, const bf16* __restrict__ b, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    a[i] = to_b(to_f(a[i]) + to_f(b[i]));
  }
}

__global__ void add_f32_kernel(float* a, const float* __restrict__ b, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    a[i] += b[i];
  }
}

// One RoPE pair of a head's row x: dims (j, j + half) for NeoX, (2j, 2j + 1) otherwise, turned
// by pos * inv_freq[j] and scaled by attention_factor. Shared by the three RoPE kernels so they
// agree to the bit (the same operations in the same order in each).
__device__ __forceinline__ void rope_pair(bf16* x, int j, int half, float pos, const float* __restrict__ inv_freq,
                                          bool neox, float attention_factor) {
  const float theta = pos * inv_freq[j];
  float s, c;
  sincosf(theta, &s, &c);
  c *= attention_factor;
  s *= attention_factor;
  const int i0 = neox ? j : 2 * j;
  const int i1 = neox ? j + half : 2 * j + 1;
  const float a = to_f(x[i0]), b = to_f(x[i1]);
  x[i0] = to_b(a * c - b * s);
  x[i1] = to_b(b * c + a * s);
}

// One head's row normalized in place by one warp: x = bf16(x * inv_rms(x) * w), rms_norm_kernel's
// formula. Shared by the RoPE kernels so the CTA-per-token and CTA-per-head paths agree to the bit.
__device__ __forceinline__ void norm_head(bf16* x, int hd, const float* __restrict__ w, float eps, int lane) {
  float ss = 0.0f;
  for (int i = lane; i < hd; i += 32) {
    const float v = to_f(x[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + eps);
  for (int i = lane; i < hd; i += 32) x[i] = to_b(to_f(x[i]) * inv * w[i]);
}

// Every pair of token t's query and key heads, one CTA per token (rope_kernel, rope_write_kv_kernel),
// after each head's norm when there is one.
__device__ __forceinline__ void rope_token(bf16* q, bf16* k, int64_t t, const int32_t* __restrict__ positions,
                                           const float* __restrict__ inv_freq, int heads, int kv_heads, int hd,
                                           int rotary_dim, bool neox, float attention_factor, const RopeNorm& norm) {
  if (norm.q_w != nullptr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int h = warp; h < heads + kv_heads; h += warps) {
      if (h < heads) norm_head(q + (t * heads + h) * hd, hd, norm.q_w, norm.eps, lane);
      else norm_head(k + (t * kv_heads + (h - heads)) * hd, hd, norm.k_w, norm.eps, lane);
    }
    __syncthreads();
  }
  const float pos = static_cast<float>(positions[t]);
  const int half = rotary_dim / 2;
  const int total = (heads + kv_heads) * half;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / half, j = i % half;
    bf16* x = h < heads ? q + (t * heads + h) * hd : k + (t * kv_heads + (h - heads)) * hd;
    rope_pair(x, j, half, pos, inv_freq, neox, attention_factor);
  }
}

__global__ void rope_kernel(bf16* q, bf16* k, const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
                            int heads, int kv_heads, int hd, int rotary_dim, bool neox, float attention_factor,
                            RopeNorm norm) {
  pdl_begin();
  rope_token(q, k, blockIdx.x, positions, inv_freq, heads, kv_heads, hd, rotary_dim, neox, attention_factor, norm);
}

// rope_kernel and write_kv_kernel in one: the token's rotated k and its v go to the cache slot.
__global__ void rope_write_kv_kernel(bf16* q, bf16* k, const bf16* __restrict__ v, bf16* __restrict__ k_cache,
                                     bf16* __restrict__ v_cache, const int32_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq, const int64_t* __restrict__ slot_mapping,
                                     int heads, int kv_heads, int hd, int rotary_dim, bool neox, float attention_factor,
                                     int64_t num_slots, RopeNorm norm) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  rope_token(q, k, t, positions, inv_freq, heads, kv_heads, hd, rotary_dim, neox, attention_factor, norm);
  __syncthreads();
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t row = int64_t{kv_heads} * hd;
  const bf16* ks = k + t * row;
  const bf16* vs = v + t * row;
  for (int64_t j = threadIdx.x * 8; j < row; j += blockDim.x * 8) {
    *reinterpret_cast<uint4*>(k_cache + slot * row + j) = *reinterpret_cast<const uint4*>(ks + j);
    *reinterpret_cast<uint4*>(v_cache + slot * row + j) = *reinterpret_cast<const uint4*>(vs + j);
  }
}

// The same at decode sizes, one CTA per (token, head): a single CTA per token looped over all 40
// heads of a Llama-8B token (4.6 us at batch 1, ncu). A kv head's CTA also writes its K (roped)
// and V rows into the cache.
__global__ void rope_write_kv_head_kernel(bf16* q, bf16* k, const bf16* __restrict__ v, bf16* __restrict__ k_cache,
                                          bf16* __restrict__ v_cache, const int32_t* __restrict__ positions,
                                          const float* __restrict__ inv_freq, const int64_t* __restrict__ slot_mapping,
                                          int heads, int kv_heads, int hd, int rotary_dim, bool neox,
                                          float attention_factor, int64_t num_slots, RopeNorm norm) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const float pos = static_cast<float>(positions[t]);
  const int half = rotary_dim / 2;
  const bool kv = h >= heads;
  const int kh = h - heads;
  bf16* x = kv ? k + (t * kv_heads + kh) * hd : q + (t * heads + h) * hd;
  if (norm.q_w != nullptr) {
    if (threadIdx.x < 32) norm_head(x, hd, kv ? norm.k_w : norm.q_w, norm.eps, threadIdx.x);
    __syncthreads();
  }
  for (int j = threadIdx.x; j < half; j += blockDim.x) rope_pair(x, j, half, pos, inv_freq, neox, attention_factor);
  if (!kv) return;  // uniform over the CTA
  __syncthreads();
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t off = slot * kv_heads * hd + int64_t{kh} * hd;
  const bf16* vs = v + (t * kv_heads + kh) * hd;
  if (hd % 8 == 0) {
    for (int j = threadIdx.x * 8; j < hd; j += blockDim.x * 8) {
      *reinterpret_cast<uint4*>(k_cache + off + j) = *reinterpret_cast<const uint4*>(x + j);
      *reinterpret_cast<uint4*>(v_cache + off + j) = *reinterpret_cast<const uint4*>(vs + j);
    }
  } else {
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
      k_cache[off + j] = x[j];
      v_cache[off + j] = vs[j];
    }
  }
}

// C: the cache's element type (kv_cache_codes.cuh); an FP8 cache stores x / scale as codes.
template <typename C, bool kVec>
__global__ void write_kv_kernel(const bf16* __restrict__ k, const bf16* __restrict__ v, C* k_cache, C* v_cache,
                                const int64_t* __restrict__ slot_mapping, int64_t row, int64_t num_slots,
                                float k_scale, float v_scale) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;  // padding token (the host checked the range)
  const bf16* ks = k + t * row;
  const bf16* vs = v + t * row;
  C* kd = k_cache + slot * row;
  C* vd = v_cache + slot * row;
  if constexpr (kVec && !CacheCodes<C>::kFp8) {
    for (int64_t j = threadIdx.x * 8; j < row; j += blockDim.x * 8) {
      *reinterpret_cast<uint4*>(kd + j) = *reinterpret_cast<const uint4*>(ks + j);
      *reinterpret_cast<uint4*>(vd + j) = *reinterpret_cast<const uint4*>(vs + j);
    }
  } else if constexpr (kVec) {
    for (int64_t j = threadIdx.x * 8; j < row; j += blockDim.x * 8) {
      float kf[8], vf[8];
      load8(ks + j, kf);
      load8(vs + j, vf);
      C kc[8], vc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        kc[e] = encode<C>(kf[e], k_scale);
        vc[e] = encode<C>(vf[e], v_scale);
      }
      *reinterpret_cast<uint2*>(kd + j) = *reinterpret_cast<const uint2*>(kc);
      *reinterpret_cast<uint2*>(vd + j) = *reinterpret_cast<const uint2*>(vc);
    }
  } else {
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
      kd[j] = encode<C>(__bfloat162float(ks[j]), k_scale);
      vd[j] = encode<C>(__bfloat162float(vs[j]), v_scale);
    }
  }
}


template <bool kVec>
__global__ void gated_kernel(const bf16* gate, const bf16* up, bool gelu_tanh, int64_t n, bf16* out) {
  pdl_begin();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if constexpr (kVec) {
    for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * 8; i < n; i += stride * 8) {
      float g[8], u[8];
      load8(gate + i, g);
      load8(up + i, u);
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] = gate_activation(g[j], gelu_tanh) * u[j];
      store8(out + i, g);
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
      out[i] = to_b(gate_activation(to_f(gate[i]), gelu_tanh) * to_f(up[i]));
    }
  }
}

__global__ void softcap_f32_kernel(float* x, float cap, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

__global__ void softcap_bf16_kernel(bf16* x, float cap, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = to_b(cap * tanhf(to_f(x[i]) / cap));
  }
}

template <typename Word>
__global__ void gather_kernel(const Word* __restrict__ src, const int32_t* __restrict__ rows, int64_t words,
                              int64_t src_rows, Word* __restrict__ out) {
  pdl_begin();
  int64_t r = rows[blockIdx.x];
  if (r < 0 || r >= src_rows) r = 0;  // validated on the host
  const Word* s = src + r * words;
  Word* d = out + int64_t{blockIdx.x} * words;
  for (int64_t j = threadIdx.x; j < words; j += blockDim.x) d[j] = s[j];
}

__global__ void add_bias_bf16_kernel(bf16* out, const float* __restrict__ bias, int64_t rows, int64_t cols) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = to_b(to_f(out[i]) + bias[i % cols]);
  }
}

__global__ void add_bias_f32_kernel(float* out, const float* __restrict__ bias, int64_t rows, int64_t cols) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += bias[i % cols];
  }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, bf16* __restrict__ dst, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = to_b(src[i]);
  }
}

__global__ void f16_to_bf16_kernel(const __half* __restrict__ src, bf16* __restrict__ dst, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = to_b(__half2float(src[i]));
  }
}

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
}

__global__ void fill_random_kernel(void* dst, int64_t n, bool f32, uint64_t seed, float scale) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = hash_uniform(seed, static_cast<uint64_t>(i)) * scale;
    if (f32) static_cast<float*>(dst)[i] = v;
    else static_cast<bf16*>(dst)[i] = to_b(v);
  }
}

constexpr int kThreads = 256;

}  // namespace

void launch_embedding(const void* table, const int32_t* ids, const int32_t* sources, const int32_t* fed, int n,
                      int64_t d, int64_t vocab, float scale, void* out, cudaStream_t s) {
  if (n <= 0) return;
  const bool vec = d % 8 == 0 && aligned16(table) && aligned16(out);
  const auto* t = static_cast<const bf16*>(table);
  auto* o = static_cast<bf16*>(out);
  if (vec) launch(embedding_kernel<true>, n, kThreads, 0, s, t, ids, sources, fed, d, vocab, scale, o);
  else launch(embedding_kernel<false>, n, kThreads, 0, s, t, ids, sources, fed, d, vocab, scale, o);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm(const void* x, const float* w, float eps, int64_t rows, int64_t d, void* out, cudaStream_t s) {
  if (rows <= 0) return;
  const bool vec = d % 8 == 0 && aligned16(x) && aligned16(out);
  const int threads = d >= 4096 ? 512 : (d >= 1024 ? 256 : 128);
  if (vec) launch(rms_norm_kernel<true>, static_cast<unsigned>(rows), threads, 0, s, static_cast<const bf16*>(x), w, eps, d, static_cast<bf16*>(out));
  else launch(rms_norm_kernel<false>, static_cast<unsigned>(rows), threads, 0, s, static_cast<const bf16*>(x), w, eps, d, static_cast<bf16*>(out));
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_add_rms_norm(void* residual, const void* x, const float* w, float eps, int64_t rows, int64_t d, void* out,
                         cudaStream_t s) {
  if (rows <= 0) return;
  const bool vec = d % 8 == 0 && aligned16(residual) && aligned16(x) && aligned16(out);
  const int threads = d >= 4096 ? 512 : (d >= 1024 ? 256 : 128);
  auto* r = static_cast<bf16*>(residual);
  auto* xi = static_cast<const bf16*>(x);
  auto* o = static_cast<bf16*>(out);
  if (vec) launch(add_rms_norm_kernel<true>, static_cast<unsigned>(rows), threads, 0, s, r, xi, w, eps, d, o);
  else launch(add_rms_norm_kernel<false>, static_cast<unsigned>(rows), threads, 0, s, r, xi, w, eps, d, o);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_add(void* a, const void* b, int64_t n, Elem e, cudaStream_t s) {
  if (n <= 0) return;
  if (e == Elem::kBf16) launch(add_bf16_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<bf16*>(a), static_cast<const bf16*>(b), n);
  else launch(add_f32_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<float*>(a), static_cast<const float*>(b), n);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_rope(void* q, void* k, const int32_t* positions, const float* inv_freq, int n, int heads, int kv_heads,
                 int hd, int rotary_dim, bool neox, float attention_factor, const RopeNorm& norm, cudaStream_t s) {
  if (n <= 0 || (rotary_dim < 2 && norm.q_w == nullptr)) return;
  const int total = (heads + kv_heads) * (rotary_dim / 2);
  const int threads = total >= 512 ? 512 : ((total + 31) / 32) * 32;
  launch(rope_kernel, n, std::max(threads, 128), 0, s, static_cast<bf16*>(q), static_cast<bf16*>(k), positions, inv_freq,
         heads, kv_heads, hd, rotary_dim, neox, attention_factor, norm);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_rope_write_kv(void* q, void* k, const void* v, void* k_cache, void* v_cache, const int32_t* positions,
                          const float* inv_freq, const int64_t* slot_mapping, int n, int heads, int kv_heads, int hd,
                          int rotary_dim, bool neox, float attention_factor, int64_t num_slots, const RopeNorm& norm,
                          cudaStream_t s) {
  if (n <= 0) return;
  const bool per_head = kernel_tuning().rope_per_head;
  if (per_head && n <= 64) {
    const int threads = std::min(256, std::max(32, ((rotary_dim / 2 + 31) / 32) * 32));
    launch(rope_write_kv_head_kernel, dim3(static_cast<unsigned>(n), static_cast<unsigned>(heads + kv_heads)), threads,
           0, s, static_cast<bf16*>(q), static_cast<bf16*>(k), static_cast<const bf16*>(v), static_cast<bf16*>(k_cache),
           static_cast<bf16*>(v_cache), positions, inv_freq, slot_mapping, heads, kv_heads, hd, rotary_dim, neox,
           attention_factor, num_slots, norm);
    KVASIR_CUDA_LAUNCH_CHECK();
    return;
  }
  const int total = (heads + kv_heads) * std::max(rotary_dim / 2, 1);
  const int threads = total >= 512 ? 512 : std::max(128, ((total + 31) / 32) * 32);
  launch(rope_write_kv_kernel, n, threads, 0, s, static_cast<bf16*>(q), static_cast<bf16*>(k), static_cast<const bf16*>(v),
         static_cast<bf16*>(k_cache), static_cast<bf16*>(v_cache), positions, inv_freq, slot_mapping, heads, kv_heads, hd,
         rotary_dim, neox, attention_factor, num_slots, norm);
}

namespace {
template <typename C>
void launch_write_kv_codes(const void* k, const void* v, void* k_cache, void* v_cache, const int64_t* slot_mapping,
                           int n, int64_t row, int64_t num_slots, float k_scale, float v_scale, cudaStream_t s) {
  const bool vec = row % 8 == 0 && aligned16(k) && aligned16(v) && aligned16(k_cache) && aligned16(v_cache);
  const int threads = 128;
  auto* ks = static_cast<const bf16*>(k);
  auto* vs = static_cast<const bf16*>(v);
  auto* kc = static_cast<C*>(k_cache);
  auto* vc = static_cast<C*>(v_cache);
  if (vec) launch(write_kv_kernel<C, true>, n, threads, 0, s, ks, vs, kc, vc, slot_mapping, row, num_slots, k_scale, v_scale);
  else launch(write_kv_kernel<C, false>, n, threads, 0, s, ks, vs, kc, vc, slot_mapping, row, num_slots, k_scale, v_scale);
  KVASIR_CUDA_LAUNCH_CHECK();
}
}  // namespace

void launch_write_kv(const void* k, const void* v, void* k_cache, void* v_cache, const int64_t* slot_mapping, int n,
                     int64_t row, int64_t num_slots, KvCacheType cache, float k_scale, float v_scale, cudaStream_t s) {
  if (n <= 0) return;
  with_cache_codes(cache, [&]<typename C>() {
    launch_write_kv_codes<C>(k, v, k_cache, v_cache, slot_mapping, n, row, num_slots, k_scale, v_scale, s);
  });
}

void launch_gated_activation(const void* gate, const void* up, bool gelu_tanh, int64_t n, void* out, cudaStream_t s) {
  if (n <= 0) return;
  auto* g = static_cast<const bf16*>(gate);
  auto* u = static_cast<const bf16*>(up);
  auto* o = static_cast<bf16*>(out);
  if (n % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out)) {
    launch(gated_kernel<true>, grid_for(n / 8, kThreads), kThreads, 0, s, g, u, gelu_tanh, n, o);
  } else {
    launch(gated_kernel<false>, grid_for(n, kThreads), kThreads, 0, s, g, u, gelu_tanh, n, o);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_softcap(void* x, float cap, int64_t n, Elem e, cudaStream_t s) {
  if (n <= 0) return;
  if (e == Elem::kF32) launch(softcap_f32_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<float*>(x), cap, n);
  else launch(softcap_bf16_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<bf16*>(x), cap, n);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const void* src, const int32_t* rows, int k, int64_t row_bytes, int64_t src_rows, void* out,
                        cudaStream_t s) {
  if (k <= 0) return;
  if (row_bytes % 16 == 0 && aligned16(src) && aligned16(out)) {
    launch(gather_kernel<uint4>, k, 128, 0, s, static_cast<const uint4*>(src), rows, row_bytes / 16, src_rows, static_cast<uint4*>(out));
  } else if (row_bytes % 4 == 0) {
    launch(gather_kernel<uint32_t>, k, 128, 0, s, static_cast<const uint32_t*>(src), rows, row_bytes / 4, src_rows, static_cast<uint32_t*>(out));
  } else {
    launch(gather_kernel<uint8_t>, k, 128, 0, s, static_cast<const uint8_t*>(src), rows, row_bytes, src_rows, static_cast<uint8_t*>(out));
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_add_bias(void* out, const float* bias, int64_t rows, int64_t cols, Elem e, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  if (e == Elem::kBf16) launch(add_bias_bf16_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<bf16*>(out), bias, rows, cols);
  else launch(add_bias_f32_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<float*>(out), bias, rows, cols);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_f32_to_bf16(const float* src, void* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch(f32_to_bf16_kernel, grid_for(n, kThreads), kThreads, 0, s, src, static_cast<bf16*>(dst), n);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_f16_to_bf16(const void* src, void* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch(f16_to_bf16_kernel, grid_for(n, kThreads), kThreads, 0, s, static_cast<const __half*>(src), static_cast<bf16*>(dst), n);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_fill_random(void* dst, int64_t n, Elem e, uint64_t seed, float scale, cudaStream_t s) {
  if (n <= 0) return;
  launch(fill_random_kernel, grid_for(n, kThreads), kThreads, 0, s, dst, n, e == Elem::kF32, seed, scale);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
