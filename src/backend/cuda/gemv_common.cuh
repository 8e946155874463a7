// What the CUDA-core GEMV (gemv.cu) and the tensor-core one (gemv_tensor_core.cu) share: the
// block shape, bf16 unpacking and the input staging with an RMSNorm folded in.
#pragma once

#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda::gemv_detail {

inline constexpr int kWarps = 8;

// Calls f(std::integral_constant<int, N>{}) for the token count n in 1..kGemvMaxRows: the host
// side's one switch from a run-time count to the kernels' compile-time one.
template <typename F>
void with_token_count(int n, F&& f) {
  switch (n) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: KVASIR_CHECK_MSG(false, "gemv: unsupported row count");
  }
}

__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load_g8(const float* g, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(g);
  const float4 b = *reinterpret_cast<const float4*>(g + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// With a norm folded in, the CTA normalises its input rows once into shared memory the way
// rms_norm does (h = bf16(x * inv * g), inv = 1 / rms(x)), and its warps read h from there; the
// first CTA also writes h out. Returns where the warps read their input.
template <int N, bool kNorm>
__device__ __forceinline__ const bf16* stage_input(const GemvInput& in, int64_t k, bf16* hs) {
  const auto* x = static_cast<const bf16*>(in.x);
  if constexpr (!kNorm) {
    return x;
  } else {
    __shared__ float red[kWarps][N];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float ss[N];
#pragma unroll
    for (int t = 0; t < N; ++t) ss[t] = 0.0f;
    for (int64_t i = threadIdx.x * 8; i < k; i += kWarps * 32 * 8) {
#pragma unroll
      for (int t = 0; t < N; ++t) {
        const uint4 u = *reinterpret_cast<const uint4*>(x + t * k + i);
        *reinterpret_cast<uint4*>(hs + t * k + i) = u;
        float v[8];
        unpack8(u, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss[t] += v[e] * v[e];
      }
    }
#pragma unroll
    for (int t = 0; t < N; ++t) {
      ss[t] = warp_sum(ss[t]);
      if (lane == 0) red[warp][t] = ss[t];
    }
    __syncthreads();
    float inv[N];
#pragma unroll
    for (int t = 0; t < N; ++t) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += red[w][t];
      inv[t] = 1.0f / sqrtf(sum / static_cast<float>(k) + in.eps);
    }
    bf16* h_out = blockIdx.x == 0 ? static_cast<bf16*>(in.h_out) : nullptr;
    for (int64_t i = threadIdx.x * 8; i < k; i += kWarps * 32 * 8) {
      float gf[8];
      load_g8(in.norm_w + i, gf);
#pragma unroll
      for (int t = 0; t < N; ++t) {
        float v[8];
        unpack8(*reinterpret_cast<const uint4*>(hs + t * k + i), v);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = v[e] * inv[t] * gf[e];
        store8(hs + t * k + i, v);
        if (h_out != nullptr) store8(h_out + t * k + i, v);
      }
    }
    __syncthreads();
    return hs;
  }
}

struct Segments {
  GemvOut seg[kGemvMaxOutputs];
  int num;
};

}  // namespace kvasir::cuda::gemv_detail
