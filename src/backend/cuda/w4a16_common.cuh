// Device helpers of the W4A16 kernels (w4a16_kernels.h): codes to exact bf16 integers, scales to
// float, the streaming 16-byte load. Header-only device code; must not hold kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/w4a16_kernels.h"

namespace kvasir::cuda {

// bf16x2 of (128 + zero) in both halves: 128 + z has exponent 7 and mantissa z (z <= 16 < 128).
__device__ __forceinline__ uint32_t w4a16_zero_pair(uint32_t zero) { return (0x4300u | zero) * 0x10001u; }

// Pair q (0..3) of a layout word as the bf16x2 fragment register (code - zero) of both halves:
// OR-ing a code into the mantissa of 128.0 gives 128 + code exactly, and (128 + code) - (128 + zero)
// is a small integer, which bf16 holds exactly (so is the subtraction's result). The mask and the
// OR are one LOP3 (written out: the compiler otherwise spends two, having two immediates).
__device__ __forceinline__ uint32_t w4a16_pair(uint32_t word, int q, uint32_t zero_pair) {
  uint32_t v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(word >> (4 * q)), "n"(0x000F000F), "r"(0x43004300u));
  __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&v);
  const __nv_bfloat162 z = *reinterpret_cast<const __nv_bfloat162*>(&zero_pair);
  a = __hsub2(a, z);
  return *reinterpret_cast<uint32_t*>(&a);
}

// Scale i of an array of kType (W4a16ScaleType) elements as float32: exact for every type.
template <int kType>
__device__ __forceinline__ float w4a16_scale_as(const void* scales, int64_t i) {
  if constexpr (kType == kW4a16ScaleF32) {
    return static_cast<const float*>(scales)[i];
  } else {
    const uint16_t b = static_cast<const uint16_t*>(scales)[i];
    if constexpr (kType == kW4a16ScaleBf16) return __uint_as_float(static_cast<uint32_t>(b) << 16);
    else return __half2float(__ushort_as_half(b));
  }
}
// The same for a type known at run time.
__device__ __forceinline__ float w4a16_scale(const void* scales, int64_t i, int type) {
  if (type == kW4a16ScaleF32) return w4a16_scale_as<kW4a16ScaleF32>(scales, i);
  if (type == kW4a16ScaleBf16) return w4a16_scale_as<kW4a16ScaleBf16>(scales, i);
  return w4a16_scale_as<kW4a16ScaleF16>(scales, i);
}

// Groups without a division in the loops: the group of 32-column half hh is hh / d for
// d = group_size / 32, computed as umulhi(hh, magic) with magic = ceil(2^32 / d), exact while
// hh < 2^20 and d < 2^12 (hh d / 2^32 errs by less than hh / 2^32 < 1 / d); magic 0 stands for
// d = 1 (2^32 does not fit).
struct W4a16Groups {
  uint32_t magic;
  int32_t split_chunks;  // group_size % 64 != 0: a 64-column chunk's halves may lie in two groups
};
inline bool w4a16_groups_supported(int64_t group_size, int64_t in_features) {
  return group_size >= 32 && group_size % 32 == 0 && group_size < 32 * 4096 && in_features < 32 * (int64_t{1} << 20);
}
inline W4a16Groups w4a16_groups(int64_t group_size) {
  const uint64_t d = static_cast<uint64_t>(group_size / 32);
  return {static_cast<uint32_t>(((uint64_t{1} << 32) + d - 1) / d), group_size % 64 != 0 ? 1 : 0};
}
__device__ __forceinline__ uint32_t w4a16_group_of(uint32_t hh, uint32_t magic) {
  return magic == 0 ? hh : __umulhi(hh, magic);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float w4a16_gate_act(float g, int act) { return gate_activation(g, act == kGateGeluTanh); }

}  // namespace kvasir::cuda
