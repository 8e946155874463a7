// The K-quant formats of the A-operand GEMV (gguf_kquant_gemv.cu) and GEMM (gguf_kquant_gemm.cu): how
// one lane fetches its share of a super-block (16 rows x 256 columns per warp), decodes the
// per-sub-block factors and turns its quant bytes into m16n8k16 A fragments. Lane (g, t) holds rows g and g + 8; a fragment register
// is a pair of k16 slots, (2t, 2t + 1) or (2t + 8, 2t + 9), and any column order works as long as
// x (the B operand) is read in the same one: here bytes (0, 2) of a quant word are the pair of a0
// and bytes (1, 3) that of a2, so x's columns (c, c + 2) and (c + 1, c + 3) are PRMTed from one
// load; one more MMA of an all-ones A gives the sums of x that the factors' offsets multiply.
// Quants enter the MMAs as the exact bf16 integers 128 + q (0x4300 | q: q under the exponent of
// 128) and every scale is applied in float32 after them:
//   Q4_K: w = dl q - ml per 32-column sub-block (dl = d sc, ml = dmin m, quant/dequantize.cpp), so
//         sum w x = dl sum (128 + q) x - (128 dl + ml) sum x; factors (dl, -(128 dl + ml)).
//   Q6_K: w = dl (q - 32) per 16-column sub-block (dl = d sc), so sum w x = dl (sum (128 + q) x -
//         160 sum x); factor dl.
// No weight is rounded: the products are the reference's, summed in float32. Each format's sum()
// takes kOne for a single token (batch 1): the C fragments' odd token columns are then never used
// and their folds are skipped.
// The GEMM's sum_rounded() instead turns the fragments into the weights themselves, rounded to bf16
// (the exact integers q, then dl q - ml or dl (q - 32) in one bf16x2 FMA with the factors rounded
// to bf16, as decode_factors_bf16 writes them), so its MMAs accumulate straight into the tile: two
// instructions a fragment register, shared by the eight octets of tokens, against the eight float32
// folds an octet and sub-block of the exact scheme. The words' middle bytes are swapped first, so
// the fragments' column pairs are x's own (8t, 8t + 1), (8t + 2, 8t + 3), ...: x needs no PRMT.
// Header-only device code for gguf_kquant_gemv.cu and gguf_kquant_gemm.cu.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda::kquant {

__device__ __forceinline__ uint2 load_stream8(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Where a super-block's bytes are read from: global memory by the read-only path, not kept in L1
// (the per-tile GEMV and the GEMM), or a shared-memory stage the bulk-copy engine filled (the
// streamed GEMV, gguf_kquant_stream.cu). Addresses are aligned to the width read.
struct GlobalBytes {
  __device__ __forceinline__ static uint4 u128(const uint8_t* p) { return load_stream(p); }
  __device__ __forceinline__ static uint2 u64(const uint8_t* p) { return load_stream8(p); }
  __device__ __forceinline__ static uint32_t u32(const uint8_t* p) { return __ldg(reinterpret_cast<const uint32_t*>(p)); }
  __device__ __forceinline__ static uint32_t u16(const uint8_t* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
  }
};
struct SharedBytes {
  __device__ __forceinline__ static uint4 u128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ static uint2 u64(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
  __device__ __forceinline__ static uint32_t u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
  __device__ __forceinline__ static uint32_t u16(const uint8_t* p) { return *reinterpret_cast<const unsigned short*>(p); }
};

// A word at a 4-byte aligned address, or (kOdd) at one that is only 2-byte aligned (Q6_K's 210-byte
// super-blocks: every other one starts 2 bytes off).
template <bool kOdd, class M = GlobalBytes>
__device__ __forceinline__ uint32_t load_word(const uint8_t* p) {
  if constexpr (kOdd) {
    return M::u16(p) | (M::u16(p + 2) << 16);
  } else {
    return M::u32(p);
  }
}

// d = A * B with no accumulator to clear (C is the zero register).
__device__ __forceinline__ void mma_fresh(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// (a & MASK) | c in one LOP3 (c in a register: the compiler splits an AND and an OR of two
// immediates into two).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "n"(kMask), "r"(c));
  return r;
}

// bf16x2 a * b + c, one rounding.
__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
constexpr uint32_t kBf16OnePair = 0x3f803f80u;     // (1, 1)
constexpr uint32_t kBf16Minus128Pair = 0xc300c300u;  // (-128, -128)
constexpr uint32_t kBf16Minus160Pair = 0xc320c320u;  // (-160, -160)
constexpr uint32_t kBf16MinusZeroPair = 0x80008000u;

// Bytes (b0, b1, b2, b3) -> (b0, b2, b1, b3).
__device__ __forceinline__ uint32_t swap_middle_bytes(uint32_t w) { return __byte_perm(w, 0, 0x3120); }

// 0x43004300 in a register the compiler cannot fold into an immediate.
__device__ __forceinline__ uint32_t bf16_128_pair() {
  uint32_t magic;
  asm("mov.b32 %0, 0x43004300;" : "=r"(magic));
  return magic;
}

// Where a lane's x comes from: shared memory (staged rows) or L1. The sums of x over each sub-block
// come from one more MMA with an all-ones A, the same operations whichever way x came (a token's
// result does not depend on the batch around it); staging them per CTA measured slower from 8
// tokens up (every CTA reads all of x before its first MMA).
template <int NT>
struct XSource {
  const bf16* row[NT];  // the lane's token of each octet
};

constexpr uint32_t kOnesPair = 0x3f803f80u;  // bf16 (1, 1)

// x pairs: v.x = (x0, x1), v.y = (x2, x3) -> b0 = (x0, x2), b1 = (x1, x3).
__device__ __forceinline__ void x_pairs(uint32_t lo, uint32_t hi, uint32_t& b0, uint32_t& b1) {
  b0 = __byte_perm(lo, hi, 0x5410);
  b1 = __byte_perm(lo, hi, 0x7632);
}

// The bytes of one super-block's decoded factors, either format (Q4K: 8 sub-blocks x 8 rows x 4
// floats; Q6K: 16 x 8 x 2): the per-warp buffer decode_factors writes and sum() reads.
inline constexpr int kFactorBytes = 1024;

// ---------------------------------------------------------------------------------------------
struct Q4K {
  static constexpr int kBlockBytes = 144;  // fp16 d, dmin; 12 bytes of 6-bit scales and mins; 128 of quants
  static constexpr int kFactorFloats = 4;  // per (sub-block, g): dl, e of row g, then of row g + 8
  static constexpr bool kAligned = true;   // 144 = 9 x 16
  static constexpr int kMinBlocks = 3;     // CTAs per SM at one octet (80 registers; 128 measured
                                           // no faster: batch-1 step 3.49-3.54 ms against 3.39-3.45)
  // q[c] row g, q[4 + c] row g + 8: bytes 8t .. 8t + 7 of quant chunk c (byte i: column 64c + 8t
  // + i in its low nibble, sub-block 2c; 64c + 32 + 8t + i in its high one, sub-block 2c + 1);
  // h: the 16-byte header of row lane % 16.
  struct Block {
    uint2 q[8];
    uint4 h;
  };

  template <bool kOdd, class M = GlobalBytes>
  __device__ __forceinline__ static void load(const uint8_t* rg, const uint8_t* rg8, const uint8_t* rh, int t,
                                              Block& b) {
    b.h = M::u128(rh);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      b.q[c] = M::u64(rg + 16 + 8 * t + 32 * c);
      b.q[4 + c] = M::u64(rg8 + 16 + 8 * t + 32 * c);
    }
  }

  // Lane L decodes sub-blocks 4 (L / 16) .. + 3 of row L % 16 (quant::kquant_scale_min four bytes at
  // a time) and hands put each (slot, dl, ml): slot [sub][g] of 8 bytes, row g in its first half of
  // a 16-byte [sub][g] pair, row g + 8 in its second.
  template <class Put>
  __device__ __forceinline__ static void for_each_factor(const Block& b, int lane, Put&& put) {
    const uint4& h = b.h;
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x >> 16)));
    const int r = lane & 15;
    uint32_t sc, mn;
    if (lane < 16) {
      sc = h.y & 0x3f3f3f3fu;
      mn = h.z & 0x3f3f3f3fu;
    } else {
      sc = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
      mn = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
    }
    const int slot = ((lane >> 4) * 4 * 8 + (r & 7)) * 2 + (r >> 3);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      put(slot + j * 16, __fmul_rn(d, static_cast<float>((sc >> (8 * j)) & 0xffu)),
          __fmul_rn(dmin, static_cast<float>((mn >> (8 * j)) & 0xffu)));
    }
  }

  // buf [sub][g] float4 (dl, -(128 dl + ml) of row g, then of g + 8).
  __device__ __forceinline__ static void decode_factors(const Block& b, int lane, float* buf) {
    for_each_factor(b, lane, [&](int slot, float dl, float ml) {
      reinterpret_cast<float2*>(buf)[slot] = make_float2(dl, -__fmaf_rn(128.0f, dl, ml));
    });
  }

  // acc += this super-block (columns col0 .. col0 + 255) for each octet; factors: buf + g.
  template <int NT, bool kStageX, bool kOne>
  __device__ __forceinline__ static void sum(const Block& b, int64_t col0, const float* factors, const XSource<NT>& xs,
                                             int t, float (&acc)[NT][4]) {
    const uint32_t magic = bf16_128_pair();
    const float4* f4 = reinterpret_cast<const float4*>(factors);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int hs = 0; hs < 2; ++hs) {  // low nibbles: sub-block 2c; high: 2c + 1
        const int sub = 2 * c + hs, sh = 4 * hs;
        const float4 f = f4[sub * 8];
        const uint2* q = b.q;
        const uint32_t a0[4] = {and_or<0x000f000fu>(q[c].x >> sh, magic), and_or<0x000f000fu>(q[4 + c].x >> sh, magic),
                                and_or<0x000f000fu>(q[c].x >> (sh + 8), magic),
                                and_or<0x000f000fu>(q[4 + c].x >> (sh + 8), magic)};
        const uint32_t a1[4] = {and_or<0x000f000fu>(q[c].y >> sh, magic), and_or<0x000f000fu>(q[4 + c].y >> sh, magic),
                                and_or<0x000f000fu>(q[c].y >> (sh + 8), magic),
                                and_or<0x000f000fu>(q[4 + c].y >> (sh + 8), magic)};
        const int64_t col = col0 + 64 * c + 32 * hs;
#pragma unroll
        for (int o = 0; o < NT; ++o) {
          uint4 xv;
          if constexpr (kStageX) xv = *reinterpret_cast<const uint4*>(xs.row[o] + col + 8 * t);
          else xv = __ldg(reinterpret_cast<const uint4*>(xs.row[o] + col + 8 * t));
          uint32_t b00, b01, b10, b11;
          x_pairs(xv.x, xv.y, b00, b01);
          x_pairs(xv.z, xv.w, b10, b11);
          float s[4], xsum[4];
          mma_fresh(s, a0[0], a0[1], a0[2], a0[3], b00, b01);
          mma_bf16_unordered(s, a1[0], a1[1], a1[2], a1[3], b10, b11);
          mma_fresh(xsum, kOnesPair, kOnesPair, kOnesPair, kOnesPair, b00, b01);
          mma_bf16_unordered(xsum, kOnesPair, kOnesPair, kOnesPair, kOnesPair, b10, b11);
          acc[o][0] = fmaf(f.x, s[0], fmaf(f.y, xsum[0], acc[o][0]));
          acc[o][2] = fmaf(f.z, s[2], fmaf(f.w, xsum[2], acc[o][2]));
          if constexpr (!kOne) {
            acc[o][1] = fmaf(f.x, s[1], fmaf(f.y, xsum[1], acc[o][1]));
            acc[o][3] = fmaf(f.z, s[3], fmaf(f.w, xsum[3], acc[o][3]));
          }
        }
      }
    }
  }

  // For sum_rounded: buf [sub][g] uint4 (dl, -ml of row g, then of g + 8), each a bf16 pair (v, v).
  __device__ __forceinline__ static void decode_factors_bf16(const Block& b, int lane, uint32_t* buf) {
    for_each_factor(b, lane, [&](int slot, float dl, float ml) {
      reinterpret_cast<uint2*>(buf)[slot] = make_uint2(pack_bf16(dl, dl), pack_bf16(-ml, -ml));
    });
  }

  // acc += this super-block's weights, rounded to bf16, times x (columns 0 .. 255 of the x source)
  // for each octet; factors: decode_factors_bf16's buf + 4 g.
  template <int NT, class XS>
  __device__ __forceinline__ static void sum_rounded(const Block& b, const uint32_t* factors, const XS& xs, int t,
                                                     float (&acc)[NT][4]) {
    const uint32_t magic = bf16_128_pair();
    const uint4* f4 = reinterpret_cast<const uint4*>(factors);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint32_t gx = swap_middle_bytes(b.q[c].x), gy = swap_middle_bytes(b.q[c].y);
      const uint32_t hx = swap_middle_bytes(b.q[4 + c].x), hy = swap_middle_bytes(b.q[4 + c].y);
#pragma unroll
      for (int hs = 0; hs < 2; ++hs) {  // low nibbles: sub-block 2c; high: 2c + 1
        const int sub = 2 * c + hs, sh = 4 * hs;
        const uint4 f = f4[sub * 8];
        const auto w = [&](uint32_t v, uint32_t dl, uint32_t nml) {
          return bf16x2_fma(bf16x2_fma(and_or<0x000f000fu>(v, magic), kBf16OnePair, kBf16Minus128Pair), dl, nml);
        };
        const uint32_t a0[4] = {w(gx >> sh, f.x, f.y), w(hx >> sh, f.z, f.w), w(gx >> (sh + 8), f.x, f.y),
                                w(hx >> (sh + 8), f.z, f.w)};
        const uint32_t a1[4] = {w(gy >> sh, f.x, f.y), w(hy >> sh, f.z, f.w), w(gy >> (sh + 8), f.x, f.y),
                                w(hy >> (sh + 8), f.z, f.w)};
        const int col = 64 * c + 32 * hs;
        // Octets four at a time, each's two MMAs four apart: back to back, the second waits for the
        // first's accumulator (the compiler's order at 128 registers: a stall per octet).
#pragma unroll
        for (int o0 = 0; o0 < NT; o0 += 4) {
          uint2 hi[4];
#pragma unroll
          for (int o = o0; o < o0 + 4 && o < NT; ++o) {
            const uint4 xv = xs.x16(o, col, t);
            hi[o - o0] = make_uint2(xv.z, xv.w);
            mma_bf16_unordered(acc[o], a0[0], a0[1], a0[2], a0[3], xv.x, xv.y);
          }
#pragma unroll
          for (int o = o0; o < o0 + 4 && o < NT; ++o) {
            mma_bf16_unordered(acc[o], a1[0], a1[1], a1[2], a1[3], hi[o - o0].x, hi[o - o0].y);
          }
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
struct Q6K {
  static constexpr int kBlockBytes = 210;  // ql[128], qh[64], int8 scales[16], fp16 d
  static constexpr int kFactorFloats = 2;  // per (sub-block, g): dl of row g, of row g + 8
  static constexpr bool kAligned = false;  // every other super-block starts 2 bytes off a word
  static constexpr int kMinBlocks = 2;     // two super-blocks of words in flight need ~100 registers
  // Column 128 h + 32 qq + 16 is + l (l < 16) of a super-block: low 4 bits in ql[64 h + 32 (qq & 1)
  // + 16 is + l] (low nibble for qq < 2, high for qq >= 2), high 2 bits at bit 2 qq of qh[32 h + 16
  // is + l], scale sc[8 h + 2 qq + is] = sub-block 8 h + 2 qq + is. Lane t holds l = 4t .. 4t + 3 of
  // every sub-block: per (h, is) and row, the ql words for qq & 1 = 0, 1 and the qh word.
  // lo[(2 h + is) * 2 + (qq & 1)], hi[2 h + is]: row g in [0], row g + 8 in [1]; sc: int8 scales
  // 8 (L / 16) .. + 7 of row L % 16, and its d.
  struct Block {
    uint32_t lo[2][8];
    uint32_t hi[2][4];
    uint32_t sc0, sc1, d;
  };

  template <bool kOdd, class M = GlobalBytes>
  __device__ __forceinline__ static void load(const uint8_t* rg, const uint8_t* rg8, const uint8_t* rh, int t,
                                              Block& b) {
    const uint8_t* rows[2] = {rg, rg8};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int hi = 0; hi < 4; ++hi) {  // (h, is) = (hi / 2, hi % 2)
        const int h = hi >> 1, is = hi & 1;
        b.lo[r][2 * hi] = load_word<kOdd, M>(rows[r] + 64 * h + 16 * is + 4 * t);
        b.lo[r][2 * hi + 1] = load_word<kOdd, M>(rows[r] + 64 * h + 32 + 16 * is + 4 * t);
        b.hi[r][hi] = load_word<kOdd, M>(rows[r] + 128 + 32 * h + 16 * is + 4 * t);
      }
    }
    const int half = static_cast<int>(threadIdx.x & 31) >> 4;
    b.sc0 = load_word<kOdd, M>(rh + 192 + 8 * half);
    b.sc1 = load_word<kOdd, M>(rh + 196 + 8 * half);
    b.d = M::u16(rh + 208);
  }

  // Lane L decodes sub-blocks 8 (L / 16) .. + 7 of row L % 16 and hands put each (slot, dl): slot
  // [sub][g] of 4 bytes, row g in its first half of an 8-byte [sub][g] pair, row g + 8 in its second.
  template <class Put>
  __device__ __forceinline__ static void for_each_factor(const Block& b, int lane, Put&& put) {
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(b.d)));
    const int r = lane & 15;
    const int slot = ((lane >> 4) * 8 * 8 + (r & 7)) * 2 + (r >> 3);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int sc = static_cast<int8_t>(((j < 4 ? b.sc0 : b.sc1) >> (8 * (j & 3))) & 0xffu);
      put(slot + j * 16, __fmul_rn(d, static_cast<float>(sc)));
    }
  }

  // buf [sub][g] float2 (dl of row g, of g + 8).
  __device__ __forceinline__ static void decode_factors(const Block& b, int lane, float* buf) {
    for_each_factor(b, lane, [&](int slot, float dl) { buf[slot] = dl; });
  }

  template <int NT, bool kStageX, bool kOne>
  __device__ __forceinline__ static void sum(const Block& b, int64_t col0, const float* factors, const XSource<NT>& xs,
                                             int t, float (&acc)[NT][4]) {
    const uint32_t magic = bf16_128_pair();
    const float2* f2 = reinterpret_cast<const float2*>(factors);
#pragma unroll
    for (int hi = 0; hi < 4; ++hi) {
      const int h = hi >> 1, is = hi & 1;
#pragma unroll
      for (int qq = 0; qq < 4; ++qq) {
        const int sub = 8 * h + 2 * qq + is;
        const float2 f = f2[sub * 8];
        uint32_t a[4];  // a[0] row g bytes (0, 2), a[1] row g + 8, a[2] row g bytes (1, 3), a[3] row g + 8
#pragma unroll
        for (int p = 0; p < 2; ++p) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint32_t lo = b.lo[r][2 * hi + (qq & 1)] >> (4 * (qq >> 1) + 8 * p);
            const int hsh = 2 * qq + 8 * p - 4;  // the 2 high bits to bits 4, 5 of each half
            const uint32_t hb = hsh >= 0 ? b.hi[r][hi] >> hsh : b.hi[r][hi] << -hsh;
            a[2 * p + r] = and_or<0x00300030u>(hb, and_or<0x000f000fu>(lo, magic));
          }
        }
        const int64_t col = col0 + 128 * h + 32 * qq + 16 * is;
#pragma unroll
        for (int o = 0; o < NT; ++o) {
          uint2 xv;
          if constexpr (kStageX) xv = *reinterpret_cast<const uint2*>(xs.row[o] + col + 4 * t);
          else xv = __ldg(reinterpret_cast<const uint2*>(xs.row[o] + col + 4 * t));
          uint32_t b0, b1;
          x_pairs(xv.x, xv.y, b0, b1);
          float s[4], xsum[4];
          mma_fresh(s, a[0], a[1], a[2], a[3], b0, b1);
          mma_fresh(xsum, kOnesPair, kOnesPair, kOnesPair, kOnesPair, b0, b1);
          acc[o][0] = fmaf(f.x, fmaf(-160.0f, xsum[0], s[0]), acc[o][0]);
          acc[o][2] = fmaf(f.y, fmaf(-160.0f, xsum[2], s[2]), acc[o][2]);
          if constexpr (!kOne) {
            acc[o][1] = fmaf(f.x, fmaf(-160.0f, xsum[1], s[1]), acc[o][1]);
            acc[o][3] = fmaf(f.y, fmaf(-160.0f, xsum[3], s[3]), acc[o][3]);
          }
        }
      }
    }
  }

  // For sum_rounded: buf [sub][g] uint2 (dl of row g, of g + 8), each a bf16 pair (dl, dl).
  __device__ __forceinline__ static void decode_factors_bf16(const Block& b, int lane, uint32_t* buf) {
    for_each_factor(b, lane, [&](int slot, float dl) { buf[slot] = pack_bf16(dl, dl); });
  }

  // As Q4K::sum_rounded: dl (q - 32) rounded to bf16; factors: decode_factors_bf16's buf + 2 g.
  template <int NT, class XS>
  __device__ __forceinline__ static void sum_rounded(const Block& b, const uint32_t* factors, const XS& xs, int t,
                                                     float (&acc)[NT][4]) {
    const uint32_t magic = bf16_128_pair();
    const uint2* f2 = reinterpret_cast<const uint2*>(factors);
#pragma unroll
    for (int hi = 0; hi < 4; ++hi) {
      const int h = hi >> 1, is = hi & 1;
      uint32_t lo[2][2], hw[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        lo[r][0] = swap_middle_bytes(b.lo[r][2 * hi]);
        lo[r][1] = swap_middle_bytes(b.lo[r][2 * hi + 1]);
        hw[r] = swap_middle_bytes(b.hi[r][hi]);
      }
#pragma unroll
      for (int qq = 0; qq < 4; ++qq) {
        const int sub = 8 * h + 2 * qq + is;
        const uint2 f = f2[sub * 8];
        uint32_t a[4];  // a[0] row g columns (4t, 4t + 1), a[1] row g + 8, a[2] row g (4t + 2, 4t + 3), a[3] row g + 8
#pragma unroll
        for (int p = 0; p < 2; ++p) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint32_t l = lo[r][qq & 1] >> (4 * (qq >> 1) + 8 * p);
            const int hsh = 2 * qq + 8 * p - 4;
            const uint32_t hb = hsh >= 0 ? hw[r] >> hsh : hw[r] << -hsh;
            const uint32_t q128 = and_or<0x00300030u>(hb, and_or<0x000f000fu>(l, magic));
            a[2 * p + r] = bf16x2_fma(bf16x2_fma(q128, kBf16OnePair, kBf16Minus160Pair), r == 0 ? f.x : f.y,
                                      kBf16MinusZeroPair);
          }
        }
        const int col = 128 * h + 32 * qq + 16 * is;
#pragma unroll
        for (int o = 0; o < NT; ++o) {
          const uint2 xv = xs.x8(o, col, t);
          mma_bf16_unordered(acc[o], a[0], a[1], a[2], a[3], xv.x, xv.y);
        }
      }
    }
  }
};

// A warp's 16-row tile of one weight: the rows a lane fetches quants from (g, g + 8) and the row whose
// header it decodes (lane % 16). Rows past m repeat the last (their sums are never written).
struct TileRows {
  const uint8_t *rg, *rg8, *rh;
};
__device__ __forceinline__ TileRows tile_rows(const void* w, int64_t m, int64_t row_bytes, int64_t row0, int lane) {
  const auto row = [&](int64_t r) { return static_cast<const uint8_t*>(w) + (r < m ? r : m - 1) * row_bytes; };
  return {row(row0 + (lane >> 2)), row(row0 + (lane >> 2) + 8), row(row0 + (lane & 15))};
}

// Super-block sb of the tile into b (Q6_K's odd super-blocks start 2 bytes off a word).
template <class F>
__device__ __forceinline__ void load_super_block(const TileRows& tr, int sb, int t, typename F::Block& b) {
  const int64_t off = static_cast<int64_t>(sb) * F::kBlockBytes;
  if (F::kAligned || (sb & 1) == 0) F::template load<false>(tr.rg + off, tr.rg8 + off, tr.rh + off, t, b);
  else F::template load<true>(tr.rg + off, tr.rg8 + off, tr.rh + off, t, b);
}

static_assert(8 * 8 * Q4K::kFactorFloats * 4 == kFactorBytes && 16 * 8 * Q6K::kFactorFloats * 4 == kFactorBytes,
              "a super-block's factors fill the per-warp buffer");

}  // namespace kvasir::cuda::kquant
