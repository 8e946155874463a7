// GGUF block formats on the device: each format's decoder yields 8 consecutive weights of a row
// (chunk c = elements 8c .. 8c+7) straight from the blocks as the file stores them (layouts in
// quant/block_formats.h). Every value is computed with the same float32 operations in the same
// order as quant/dequantize.cpp's scalar reference (explicit __fmul_rn/__fadd_rn/__fsub_rn: no
// contraction into FMAs; small integers become floats exactly through small_uint_to_float), so a
// decoded weight equals the CPU's bit for bit.
// Alignment: rows start 16-byte aligned on the device (the CUDA backend's allocations, rows of
// whole blocks); Q4_K and Q5_K blocks (144, 176 bytes) stay 16-byte aligned, so their quant bytes
// are read 8 at a time; the other blocks are only 2-byte aligned and are read 16 bits at a time.
// Header-only device code; must not hold kernels.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "common/check.h"
#include "core/dtype.h"

namespace kvasir::cuda::gguf {

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}

// 4 bytes from a 2-byte aligned address.
__device__ __forceinline__ uint32_t u32_at2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}

// 8 bytes from a 2-byte aligned address, little-endian: byte i of the result is p[i].
__device__ __forceinline__ uint2 u64_at2(const uint8_t* p) { return make_uint2(u32_at2(p), u32_at2(p + 4)); }

__device__ __forceinline__ uint2 u64_at8(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

__device__ __forceinline__ uint32_t byte_of(const uint2& v, int i) { return ((i < 4 ? v.x : v.y) >> (8 * (i & 3))) & 0xffu; }

// 0 <= v < 2^23 as a float minus `minus`, exactly (for the small integers here), without the
// quarter-rate integer-to-float conversion: 2^23 + v is v's bit pattern under a float exponent.
__device__ __forceinline__ float small_uint_to_float(uint32_t v, float minus) {
  return __fsub_rn(__uint_as_float(0x4B000000u | v), 8388608.0f + minus);
}

// The 6-bit (scale, min) pair j of a Q4_K/Q5_K super-block (quant::kquant_scale_min).
__device__ __forceinline__ void kquant_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

struct Q4_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 2) * kBlockBytes;
    const int sub = static_cast<int>(c & 3);
    const float d = f16_at(b);
    const uint2 q = u64_at2(b + 2 + 8 * (sub & 1));
    const int shift = (sub >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(small_uint_to_float((byte_of(q, i) >> shift) & 0x0f, 8.0f), d);
  }
};

struct Q4_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 20;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 2) * kBlockBytes;
    const int sub = static_cast<int>(c & 3);
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint2 q = u64_at2(b + 4 + 8 * (sub & 1));
    const int shift = (sub >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __fadd_rn(__fmul_rn(small_uint_to_float((byte_of(q, i) >> shift) & 0x0f, 0.0f), d), m);
  }
};

// Q5_0 / Q5_1: element j (0..31) is nibble (j & 15) of qs (low for j < 16) with bit j of qh on top.
template <bool kMin>
struct Q5 {
  static constexpr int kBlockElems = 32, kBlockBytes = kMin ? 24 : 22;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 2) * kBlockBytes;
    const int sub = static_cast<int>(c & 3);
    const float d = f16_at(b);
    const float m = kMin ? f16_at(b + 2) : 0.0f;
    const uint8_t* qhp = b + (kMin ? 4 : 2);
    const uint32_t qh = u32_at2(qhp);
    const uint2 q = u64_at2(qhp + 4 + 8 * (sub & 1));
    const int shift = (sub >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = 8 * sub + i;
      const uint32_t v = ((byte_of(q, i) >> shift) & 0x0f) | (((qh >> j) & 1u) << 4);
      if constexpr (kMin) w[i] = __fadd_rn(__fmul_rn(small_uint_to_float(v, 0.0f), d), m);
      else w[i] = __fmul_rn(small_uint_to_float(v, 16.0f), d);
    }
  }
};
using Q5_0 = Q5<false>;
using Q5_1 = Q5<true>;

struct Q8_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 2) * kBlockBytes;
    const int sub = static_cast<int>(c & 3);
    const float d = f16_at(b);
    const uint2 q = u64_at2(b + 2 + 8 * sub);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(small_uint_to_float(byte_of(q, i) ^ 0x80u, 128.0f), d);
  }
};

// Q4_K / Q5_K: super-blocks of 256 in 4 groups of 64; group g's first 32 elements are the low
// nibbles of qs[32g .. 32g+32) (sub-block 2g), the next 32 the high nibbles (sub-block 2g+1).
template <bool kHighBit>
struct QK45 {
  static constexpr int kBlockElems = 256, kBlockBytes = kHighBit ? 176 : 144;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 5) * kBlockBytes;
    const int e = static_cast<int>(c & 31) * 8;
    const int g = e >> 6, hi = (e >> 5) & 1, l0 = e & 31, is = 2 * g + hi;
    const float d = f16_at(b), dmin = f16_at(b + 2);
    int sc, mn;
    kquant_scale_min(b + 4, is, &sc, &mn);
    const float d0 = __fmul_rn(d, small_uint_to_float(static_cast<uint32_t>(sc), 0.0f));
    const float n0 = __fmul_rn(dmin, small_uint_to_float(static_cast<uint32_t>(mn), 0.0f));
    const uint8_t* qs = b + (kHighBit ? 48 : 16);
    const uint2 q = u64_at8(qs + 32 * g + l0);
    uint2 h = make_uint2(0, 0);
    if constexpr (kHighBit) h = u64_at8(b + 16 + l0);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t v = (byte_of(q, i) >> (4 * hi)) & 0x0f;
      if constexpr (kHighBit) v |= ((byte_of(h, i) >> is) & 1) << 4;
      w[i] = __fsub_rn(__fmul_rn(d0, small_uint_to_float(v, 0.0f)), n0);
    }
  }
};
using Q4_K = QK45<false>;
using Q5_K = QK45<true>;

// Q6_K: halves of 128; in a half, quarter q (32 elements) takes the low (q < 2) or high nibbles of
// ql[32 (q & 1) + l] and bits 2q.. of qh[l]; 16 elements share a signed 8-bit scale.
struct Q6_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  __device__ static void chunk(const uint8_t* row, int64_t c, float (&w)[8]) {
    const uint8_t* b = row + (c >> 5) * kBlockBytes;
    const int e = static_cast<int>(c & 31) * 8;
    const int half = e >> 7, quarter = (e >> 5) & 3, l0 = e & 31;
    const float d = f16_at(b + 208);
    const int sc = static_cast<int8_t>(b[192 + 8 * half + (l0 >> 4) + 2 * quarter]);
    const float ds = __fmul_rn(d, static_cast<float>(sc));
    const uint2 ql = u64_at2(b + 64 * half + 32 * (quarter & 1) + l0);
    const uint2 qh = u64_at2(b + 128 + 32 * half + l0);
    const int lshift = (quarter >> 1) * 4, hshift = 2 * quarter;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = ((byte_of(ql, i) >> lshift) & 0x0f) | (((byte_of(qh, i) >> hshift) & 3) << 4);
      w[i] = __fmul_rn(ds, small_uint_to_float(v, 32.0f));
    }
  }
};

// Calls fn(Format{}) with the decoder of t (a type gguf_kernel_type() accepts).
template <typename Fn>
void with_format(DType t, Fn&& fn) {
  switch (t) {
    case DType::kQ4_0: fn(Q4_0{}); return;
    case DType::kQ4_1: fn(Q4_1{}); return;
    case DType::kQ5_0: fn(Q5_0{}); return;
    case DType::kQ5_1: fn(Q5_1{}); return;
    case DType::kQ8_0: fn(Q8_0{}); return;
    case DType::kQ4_K: fn(Q4_K{}); return;
    case DType::kQ5_K: fn(Q5_K{}); return;
    case DType::kQ6_K: fn(Q6_K{}); return;
    default: break;
  }
  KVASIR_CHECK_MSG(false, "no CUDA kernel reads this GGUF block type");
}

}  // namespace kvasir::cuda::gguf
