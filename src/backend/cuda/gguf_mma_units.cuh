// The tensor-core GGUF GEMV's unit of work (gguf_mma_gemv.cu): 32 weights of one row that share their
// fetches, decoded into the B fragments of eight m16n8k16 bf16 MMAs, and the same 32 columns of an
// activation row as the matching A fragments. A unit's element e (0..31) sits at column col(e);
// MMA j takes elements 4j .. 4j+3: b[2j] = bf16x2(w[4j], w[4j+1]), b[2j+1] = bf16x2(w[4j+2],
// w[4j+3]), a[2j] / a[2j+1] the same columns of x. Any column order works for a dot product as
// long as A and B agree, so a unit follows the block layout (one 16-byte load of quant bytes per
// unit for Q4_K/Q5_K):
//   Q4_K / Q5_K: unit u of a row = super-block u / 8, group g = (u % 8) / 2, half h = u % 2;
//     e < 16: column 64g + 16h + e (low nibble of qs[32g + 16h + e], sub-block 2g);
//     e >= 16: column 64g + 32 + 16h + (e - 16) (high nibble of the same byte, sub-block 2g + 1).
//   Q6_K: unit u = super-block u / 8, half h = (u % 8) / 4, l0 = 8 (u % 4); element e = 8q + i is
//     column 128h + 32q + l0 + i (quarter q of the half, scale 8h + l0 / 16 + 2q).
//   Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: unit u = block u, element e = column 32u + e.
// Weights are the reference's float32 values (gguf_blocks.cuh's operations) rounded to bf16, as
// the GEMM path's dequantized scratch; the K-quants compute theirs in packed bf16 (see unit_w).
// Header-only device code (a host test harness can include it with stand-ins for the intrinsics).
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/gguf_blocks.cuh"

namespace kvasir::cuda::gguf {

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t byte_at(uint32_t w0, uint32_t w1, uint32_t w2, int i) {
  const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
  return (w >> (8 * (i & 3))) & 0xffu;
}

// The (scale, min) pair j of a Q4_K/Q5_K super-block from its 12 scale bytes as three words.
__device__ __forceinline__ void scale_min_words(uint32_t w0, uint32_t w1, uint32_t w2, int j, uint32_t* sc,
                                                uint32_t* mn) {
  if (j < 4) {
    *sc = byte_at(w0, w1, w2, j) & 63;
    *mn = byte_at(w0, w1, w2, j + 4) & 63;
  } else {
    *sc = (byte_at(w0, w1, w2, j + 4) & 0x0f) | ((byte_at(w0, w1, w2, j - 4) >> 6) << 4);
    *mn = (byte_at(w0, w1, w2, j + 4) >> 4) | ((byte_at(w0, w1, w2, j) >> 6) << 4);
  }
}

// Unit decoders by format: kLegacy marks the 32-element block formats (unit = block).
struct UnitQ4_K {
  static constexpr int kBlockBytes = 144;
  static constexpr bool kHighBit = false, kLegacy = false;
};
struct UnitQ5_K {
  static constexpr int kBlockBytes = 176;
  static constexpr bool kHighBit = true, kLegacy = false;
};
struct UnitQ6_K {
  static constexpr int kBlockBytes = 210;
  static constexpr bool kHighBit = false, kLegacy = false;
};
// Legacy blocks: fp16 d [, fp16 m] [, 32 high bits] then 16 bytes of nibbles (or 32 int8 codes).
template <int kBytes, bool kMinV, bool kHigh, bool kInt8>
struct UnitLegacy {
  static constexpr int kBlockBytes = kBytes;
  static constexpr bool kHighBit = kHigh, kLegacy = true, kMin = kMinV, kQ8 = kInt8;
};
using UnitQ4_0 = UnitLegacy<18, false, false, false>;
using UnitQ4_1 = UnitLegacy<20, true, false, false>;
using UnitQ5_0 = UnitLegacy<22, false, true, false>;
using UnitQ5_1 = UnitLegacy<24, true, true, false>;
using UnitQ8_0 = UnitLegacy<34, false, false, true>;

// First columns of a unit's two 16-element runs (Q4_K/Q5_K), or of its four 8-element runs (Q6_K).
template <class F>
__device__ __forceinline__ void unit_columns(int64_t u, int64_t (&c)[4]) {
  const int64_t base = (u >> 3) * 256;
  if constexpr (F::kLegacy) {
#pragma unroll
    for (int p = 0; p < 4; ++p) c[p] = 32 * u + 8 * p;
  } else if constexpr (F::kBlockBytes == 210) {
    const int h = static_cast<int>((u & 7) >> 2), l0 = 8 * static_cast<int>(u & 3);
#pragma unroll
    for (int q = 0; q < 4; ++q) c[q] = base + 128 * h + 32 * q + l0;
  } else {
    const int g = static_cast<int>((u & 7) >> 1), h = static_cast<int>(u & 1);
    c[0] = base + 64 * g + 16 * h;
    c[1] = c[0] + 8;
    c[2] = c[0] + 32;
    c[3] = c[2] + 8;
  }
}

// a[0..16): the unit's 32 columns of x (bf16 pairs, element order), four 16-byte loads.
template <class F>
__device__ __forceinline__ void unit_x(const __nv_bfloat16* __restrict__ x, int64_t u, uint32_t (&a)[16]) {
  int64_t c[4];
  unit_columns<F>(u, c);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const uint4 v = *reinterpret_cast<const uint4*>(x + c[p]);
    a[4 * p] = v.x;
    a[4 * p + 1] = v.y;
    a[4 * p + 2] = v.z;
    a[4 * p + 3] = v.w;
  }
}

// b[0..16): the unit's 32 weights of row `row` as bf16 pairs (element order).
template <class F>
__device__ __forceinline__ void unit_w(const uint8_t* row, int64_t u, uint32_t (&b)[16]) {
  if constexpr (F::kLegacy) {
    // The reference's operations (gguf_blocks.cuh): (q - 8) d, q d + m, (q - 16) d, q d + m, q d.
    const uint8_t* blk = row + u * F::kBlockBytes;
    const float d = f16_at(blk);
    const float m = F::kMin ? f16_at(blk + 2) : 0.0f;
    const uint8_t* qp = blk + (F::kMin ? 4 : 2);
    uint32_t qh = 0;
    if constexpr (F::kHighBit) {
      qh = u32_at2(qp);
      qp += 4;
    }
    if constexpr (F::kQ8) {
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const uint2 q = u64_at2(qp + 8 * p);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float w0 = __fmul_rn(small_uint_to_float(byte_of(q, 2 * i) ^ 0x80u, 128.0f), d);
          const float w1 = __fmul_rn(small_uint_to_float(byte_of(q, 2 * i + 1) ^ 0x80u, 128.0f), d);
          b[4 * p + i] = bf16x2_bits(w0, w1);
        }
      }
    } else {
      const uint2 q0 = u64_at2(qp), q1 = u64_at2(qp + 8);
#pragma unroll
      for (int e = 0; e < 32; e += 2) {
        float w[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int j = e + i, byte = j & 15;
          uint32_t v = (byte_of(byte < 8 ? q0 : q1, byte & 7) >> (j < 16 ? 0 : 4)) & 0x0f;
          if constexpr (F::kHighBit) v |= ((qh >> j) & 1u) << 4;
          if constexpr (F::kMin) w[i] = __fadd_rn(__fmul_rn(small_uint_to_float(v, 0.0f), d), m);
          else w[i] = __fmul_rn(small_uint_to_float(v, F::kHighBit ? 16.0f : 8.0f), d);
        }
        b[e / 2] = bf16x2_bits(w[0], w[1]);
      }
    }
    return;
  }
  const uint8_t* blk = row + (u >> 3) * F::kBlockBytes;
  if constexpr (F::kBlockBytes == 210) {
    const int h = static_cast<int>((u & 7) >> 2), l0 = 8 * static_cast<int>(u & 3);
    const float d = f16_at(blk + 208);
    const uint2 qla = u64_at2(blk + 64 * h + l0), qlb = u64_at2(blk + 64 * h + 32 + l0);
    const uint2 qh = u64_at2(blk + 128 + 32 * h + l0);
    const uint8_t* sc = blk + 192 + 8 * h + (l0 >> 4);
    // Two weights per packed bf16 operation, as Q4_K below: the 6-bit quants of two bytes become
    // the halves of a bf16x2 as 128 + v (exact), minus 160 gives v - 32 (exact), times
    // bf16(d·sc) with one rounding.
    const __nv_bfloat162 bias160 = __float2bfloat162_rn(160.0f);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __nv_bfloat162 ds =
          __float2bfloat162_rn(__fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc[2 * q]))));
      const uint2& ql = (q & 1) ? qlb : qla;
#pragma unroll
      for (int i = 0; i < 8; i += 2) {  // bytes i, i + 1 of the quarter, one per half
        const uint32_t sel = (i & 2) ? 0x4342u : 0x4140u;
        const uint32_t lw = i < 4 ? ql.x : ql.y, hw = i < 4 ? qh.x : qh.y;
        uint32_t v = (__byte_perm(lw, 0u, sel) >> (4 * (q >> 1))) & 0x000f000fu;
        v |= ((__byte_perm(hw, 0u, sel) >> (2 * q)) & 0x00030003u) << 4;
        v |= 0x43004300u;
        const __nv_bfloat162 w = __hmul2(__hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), bias160), ds);
        b[4 * q + i / 2] = *reinterpret_cast<const uint32_t*>(&w);
      }
    }
  } else {
    const int g = static_cast<int>((u & 7) >> 1), h = static_cast<int>(u & 1);
    const uint32_t dd = __ldg(reinterpret_cast<const uint32_t*>(blk));
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dd & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(dd >> 16)));
    const uint32_t s0 = __ldg(reinterpret_cast<const uint32_t*>(blk + 4));
    const uint32_t s1 = __ldg(reinterpret_cast<const uint32_t*>(blk + 8));
    const uint32_t s2 = __ldg(reinterpret_cast<const uint32_t*>(blk + 12));
    float dl[2], ml[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint32_t sc, mn;
      scale_min_words(s0, s1, s2, 2 * g + s, &sc, &mn);
      dl[s] = __fmul_rn(d, small_uint_to_float(sc, 0.0f));
      ml[s] = __fmul_rn(dmin, small_uint_to_float(mn, 0.0f));
    }
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(blk + (F::kHighBit ? 48 : 16) + 32 * g + 16 * h));
    uint4 qh = make_uint4(0, 0, 0, 0);
    if constexpr (F::kHighBit) qh = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 16 * h));
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    const uint32_t hw[4] = {qh.x, qh.y, qh.z, qh.w};
    // Two weights per packed bf16 operation (a Q4_K_M model's bulk: decoding, not the bytes, bounds
    // the GEMV otherwise): the quants of two bytes become the halves of a bf16x2 through the
    // exponent trick (0x4300 | q is 128 + q, exact for q < 128), minus 128 (exact), then
    // q · bf16(d·sc) − bf16(dmin·m) in one fused bf16 operation: the scales rounded to bf16 once
    // more than the reference's float32 weights (about 2^-9 each), one rounding of the result.
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // s = 0: low nibbles (sub-block 2g), 1: high (2g + 1)
      const int bit = 2 * g + s;
      const __nv_bfloat162 scale = __float2bfloat162_rn(dl[s]), minus = __float2bfloat162_rn(-ml[s]);
      const __nv_bfloat162 bias128 = __float2bfloat162_rn(128.0f);
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {  // bytes 0, 1 then 2, 3 of the word, one per half
          const uint32_t sel = pair == 0 ? 0x4140u : 0x4342u;
          uint32_t v = (__byte_perm(qw[wi], 0u, sel) >> (4 * s)) & 0x000f000fu;
          if constexpr (F::kHighBit) v |= ((__byte_perm(hw[wi], 0u, sel) >> bit) & 0x00010001u) << 4;
          v |= 0x43004300u;
          const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), bias128);
          const __nv_bfloat162 w = __hfma2(q, scale, minus);
          b[8 * s + 2 * wi + pair] = *reinterpret_cast<const uint32_t*>(&w);
        }
      }
    }
  }
}

}  // namespace kvasir::cuda::gguf
