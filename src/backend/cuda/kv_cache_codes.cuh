// The KV cache's element types on the device (--kv-cache-dtype auto | fp8 | fp8_e4m3 | fp8_e5m2):
// bf16, or FP8 codes (e4m3fn, e5m2) of x / scale with one scale per tensor (the layer's k_scale or
// v_scale). Attention kernels are templated on the element type C; these helpers are where the
// types differ. Widening an FP8 code to float16, bf16 or float32 is exact (both formats' values
// fit all three), so a kernel may widen to bf16 for the tensor cores and lose nothing; the scales
// are folded in by the caller (k_scale into the score scale, v_scale into the output).
// Encoding matches the CPU backend's (fp8_cache_codes.h): x / scale rounded to nearest even,
// saturated at the largest finite value (__NV_SATFINITE), NaN kept.
#pragma once

#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {

using e4m3 = __nv_fp8_e4m3;
using e5m2 = __nv_fp8_e5m2;

template <typename C>
struct CacheCodes;
template <>
struct CacheCodes<bf16> {
  static constexpr bool kFp8 = false;
};
template <>
struct CacheCodes<e4m3> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kKind = __NV_E4M3;
};
template <>
struct CacheCodes<e5m2> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kKind = __NV_E5M2;
};

// Runs f.template operator()<C>() with C the element type of a cache of type t: the one place a
// launcher turns KvCacheType into a kernel's template argument.
template <typename F>
void with_cache_codes(KvCacheType t, F&& f) {
  switch (t) {
    case KvCacheType::kE4m3: f.template operator()<e4m3>(); break;
    case KvCacheType::kE5m2: f.template operator()<e5m2>(); break;
    default: f.template operator()<bf16>(); break;
  }
}

// Two FP8 codes (low byte first) as two floats, exactly.
template <typename C>
__device__ __forceinline__ float2 widen2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), CacheCodes<C>::kKind);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Eight FP8 codes (8 bytes, the first in the low byte of u.x) as eight floats, exactly.
template <typename C>
__device__ __forceinline__ void widen8(uint2 u, float (&v)[8]) {
  const uint32_t w[2] = {u.x, u.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = widen2<C>(static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2))));
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Eight cache elements from p (global or shared memory; 16-byte aligned for bf16, 8 for FP8) as floats.
template <typename C>
__device__ __forceinline__ void load8(const C* p, float (&v)[8]) {
  if constexpr (!CacheCodes<C>::kFp8) {
    load8(reinterpret_cast<const bf16*>(p), v);
  } else {
    widen8<C>(*reinterpret_cast<const uint2*>(p), v);
  }
}

// Sixteen FP8 codes at src (shared memory, 16-byte aligned) as sixteen bf16 at dst (shared, 16-byte
// aligned): exact (FP8 values are bf16 values).
template <typename C>
__device__ __forceinline__ void widen16_to_bf16(bf16* dst, const unsigned char* src) {
  static_assert(CacheCodes<C>::kFp8, "FP8 codes");
  const uint4 u = *reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float f[8];
    widen8<C>(half == 0 ? make_uint2(u.x, u.y) : make_uint2(u.z, u.w), f);
    store8(dst + 8 * half, f);
  }
}

// One value for the cache: x / scale as the element type (bf16 caches are never scaled).
template <typename C>
__device__ __forceinline__ C encode(float x, float scale) {
  if constexpr (!CacheCodes<C>::kFp8) {
    return __float2bfloat16_rn(x);
  } else {
    C c;
    c.__x = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, CacheCodes<C>::kKind);
    return c;
  }
}

}  // namespace kvasir::cuda
