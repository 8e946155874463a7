// The AVX-512 VNNI tile on packed panels (packed_q32.h) for batches: 16 weight rows in the lanes of
// one register, C input rows in registers beside them. Per 4 values of k, one 64-byte weight load
// feeds C (two planes: 2C) vpdpbusd whose activation operand is a 4-byte broadcast from memory;
// after each 32-value block the exact int32 block sums of 16 rows sit in one register, so the
// float epilogue is a few full-width ops per block and column, with no reduction across lanes.
// Batches of more than kCols inputs take two panels (32 rows) at a time: each activation broadcast
// then feeds two vpdpbusd and each column's scales are loaded once for both panels: half the
// loads per multiply (matmul_bench --packed q4_1 n=512, one Zen 5 thread, GMAC/s one panel / two:
// 1536x576 175 / 185, 576x1536 170 / 177; the VNNI pipes' peak is 2 x 64 x 4.2 G / 2 planes = 269).
// Small batches keep one panel per pass: kCols inputs in one pass hide more of the weights'
// stream from memory than two passes of kPairCols.
// It follows kern_q32_z.inc's float order to the bit (same y as the in-place tile at any batch
// size): P_{b%4} = fma(float(I_b), dw_b * dx_b, P); P = fma(mw_b, sx_b, P) [, lo plane's too];
// y = (P_0 + P_2) + (P_1 + P_3). Built with AVX-512 flags; called only after the run-time check.
// Must not use the standard library (see simd.inc): its inline functions would carry these flags.
#include <immintrin.h>

#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/packed_q32.h"

// GCC 12 reports the _mm512_undefined_* idiom inside its own AVX-512 intrinsics as
// maybe-uninitialized (as in kernels_avx512.cpp); the warning is about the compiler's headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::cpu::avx512 {
namespace {

#define KVASIR_INLINE inline __attribute__((always_inline))
#define KVASIR_UNROLL _Pragma("GCC unroll 16")
#define KVASIR_INLINE_LAMBDA __attribute__((always_inline))

KVASIR_INLINE __m512i bcast_i32(const unsigned char* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Block b's 16 scales d and m of a panel: the GGUF's halves widened exactly; an implied m is
// m_from_d * d, as gather_dm16 makes it.
KVASIR_INLINE void block_scales(const unsigned char* d16, const unsigned char* m16, __m512 m_from_d, long b, __m512* dw,
                                __m512* mw) {
  *dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d16 + 32 * b)));
  *mw = m16 != nullptr ? _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m16 + 32 * b)))
                       : _mm512_mul_ps(*dw, m_from_d);
}

// One block b of C input rows into the accumulators P (the block's slot, b % 4, chosen by the
// caller so that every index into P is a constant). kNibbles: the block's values are 4 nibble
// pairs (packed_q32.h); groups then enter the int32 sums in the order 0, 4, 1, 5, ..., which
// changes nothing (exact integer sums).
template <int C, bool kPairs, bool kNibbles>
KVASIR_INLINE void block(const unsigned char* blk, const unsigned char* d16, const unsigned char* m16, __m512 m_from_d,
                         const unsigned char* act, long act_stride, long k, long b, __m512 P[C]) {
  constexpr long kP = kPairs ? 2 : 1;
  __m512i hi[C], lo[C];
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    hi[c] = _mm512_setzero_si512();
    if constexpr (kPairs) lo[c] = _mm512_setzero_si512();
  }
  const unsigned char* x = act + 32 * b;
  auto group = [&](__m512i w, int g) KVASIR_INLINE_LAMBDA {
    KVASIR_UNROLL for (int c = 0; c < C; ++c) {
      const unsigned char* xc = x + c * kP * act_stride + 4 * g;
      hi[c] = _mm512_dpbusd_epi32(hi[c], w, bcast_i32(xc));
      if constexpr (kPairs) lo[c] = _mm512_dpbusd_epi32(lo[c], w, bcast_i32(xc + act_stride));
    }
  };
  if constexpr (kNibbles) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    KVASIR_UNROLL for (int h = 0; h < 4; ++h) {
      const __m512i v = _mm512_load_si512(blk + 64 * h);
      group(_mm512_and_si512(v, low4), h);
      group(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), h + 4);
    }
  } else {
    KVASIR_UNROLL for (int g = 0; g < 8; ++g) group(_mm512_load_si512(blk + 64 * g), g);
  }
  __m512 dw, mw;
  block_scales(d16, m16, m_from_d, b, &dw, &mw);
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    const unsigned char* a = act + c * kP * act_stride;
    const float* ds0 = reinterpret_cast<const float*>(a + k) + 2 * b;
    const float* ds1 = kPairs ? reinterpret_cast<const float*>(a + act_stride + k) + 2 * b : ds0;
    __m512i isum = hi[c];
    if constexpr (kPairs) isum = _mm512_add_epi32(_mm512_slli_epi32(hi[c], 8), lo[c]);
    P[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(ds1[0])), P[c]);
    P[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ds0[1]), P[c]);
    if constexpr (kPairs) P[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ds1[1]), P[c]);
  }
}

// Software prefetch distance ahead of the block being read (simd.inc's kPrefetchBytes for the
// in-place tiles; this file does not include simd.inc).
#ifndef KVASIR_PANEL_PREFETCH_BYTES
#define KVASIR_PANEL_PREFETCH_BYTES 2048
#endif
constexpr long kPanelPrefetchBytes = KVASIR_PANEL_PREFETCH_BYTES;

// Bytes [from, to) of the panel at p: its scales (d, then m where stored), which its first block
// needs before the stream prefetch reaches them.
KVASIR_INLINE void prefetch_scales(const unsigned char* p, long from, long to) {
  for (long l = from; l < to; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
}

template <int C, bool kPairs, bool kNibbles>
KVASIR_INLINE void tile_cols(const TileArgs& a, int nr, const unsigned char* act, long act_stride, long k, float* y,
                             long ldy) {
  const long nb = k / 32;
  const auto* panel = static_cast<const unsigned char*>(a.w);
  const unsigned char* d16 = panel + a.d_offset;
  const unsigned char* m16 = a.m_offset != 0 ? panel + a.m_offset : nullptr;
  const __m512 mfd = _mm512_set1_ps(a.m_from_d);
  __m512 P0[C], P1[C], P2[C], P3[C];
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    P0[c] = _mm512_setzero_ps();
    P1[c] = _mm512_setzero_ps();
    P2[c] = _mm512_setzero_ps();
    P3[c] = _mm512_setzero_ps();
  }
  constexpr long kB = static_cast<long>(kNibbles ? kPackedNibbleValueBytes : kPackedValueBytes);
  // The next panel's scales: its first block needs them, and the stream prefetch below reaches
  // them only halfway through that panel (they follow its values), so without this every panel
  // began with a miss to memory (one thread, 1536 x 576 Q4_1 from DRAM, 2 rows: 71-77 us).
  const long scales_end = (m16 != nullptr ? a.m_offset : a.d_offset) + nb * 32;
  prefetch_scales(panel + scales_end, a.d_offset, scales_end);
  long b = 0;
  for (; b + 4 <= nb; b += 4) {
    // Panels are contiguous, so this runs into the next panel (and its scales) near the end. The
    // hardware prefetcher alone left a batch of 2-5 rows streaming DRAM at 6.4 GB/s on one thread
    // where the in-place single-row kernel, which prefetches, streamed 8.8.
    KVASIR_UNROLL for (long l = 0; l < 4 * kB; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(panel + b * kB + kPanelPrefetchBytes + l), _MM_HINT_T0);
    }
    block<C, kPairs, kNibbles>(panel + b * kB, d16, m16, mfd, act, act_stride, k, b, P0);
    block<C, kPairs, kNibbles>(panel + (b + 1) * kB, d16, m16, mfd, act, act_stride, k, b + 1, P1);
    block<C, kPairs, kNibbles>(panel + (b + 2) * kB, d16, m16, mfd, act, act_stride, k, b + 2, P2);
    block<C, kPairs, kNibbles>(panel + (b + 3) * kB, d16, m16, mfd, act, act_stride, k, b + 3, P3);
  }
  if (b < nb) block<C, kPairs, kNibbles>(panel + b * kB, d16, m16, mfd, act, act_stride, k, b, P0);
  if (b + 1 < nb) block<C, kPairs, kNibbles>(panel + (b + 1) * kB, d16, m16, mfd, act, act_stride, k, b + 1, P1);
  if (b + 2 < nb) block<C, kPairs, kNibbles>(panel + (b + 2) * kB, d16, m16, mfd, act, act_stride, k, b + 2, P2);
  const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1u);
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    const __m512 s = _mm512_add_ps(_mm512_add_ps(P0[c], P2[c]), _mm512_add_ps(P1[c], P3[c]));
    _mm512_mask_storeu_ps(y + c * ldy, rows, s);
  }
}


// Two panels (32 rows) against C input rows: each activation broadcast feeds both panels' sums,
// and each column's scales are loaded once for both.
template <int C, bool kPairs, bool kNibbles>
KVASIR_INLINE void block2(const unsigned char* blkA, const unsigned char* blkB, const unsigned char* dA,
                          const unsigned char* dB, const unsigned char* mA, const unsigned char* mB, __m512 m_from_d,
                          const unsigned char* act, long act_stride, long k, long b, __m512 PA[C], __m512 PB[C]) {
  constexpr long kP = kPairs ? 2 : 1;
  __m512i hiA[C], loA[C], hiB[C], loB[C];
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    hiA[c] = _mm512_setzero_si512();
    hiB[c] = _mm512_setzero_si512();
    if constexpr (kPairs) {
      loA[c] = _mm512_setzero_si512();
      loB[c] = _mm512_setzero_si512();
    }
  }
  const unsigned char* x = act + 32 * b;
  auto group = [&](__m512i wA, __m512i wB, int g) KVASIR_INLINE_LAMBDA {
    KVASIR_UNROLL for (int c = 0; c < C; ++c) {
      const unsigned char* xc = x + c * kP * act_stride + 4 * g;
      const __m512i bh = bcast_i32(xc);
      hiA[c] = _mm512_dpbusd_epi32(hiA[c], wA, bh);
      hiB[c] = _mm512_dpbusd_epi32(hiB[c], wB, bh);
      if constexpr (kPairs) {
        const __m512i bl = bcast_i32(xc + act_stride);
        loA[c] = _mm512_dpbusd_epi32(loA[c], wA, bl);
        loB[c] = _mm512_dpbusd_epi32(loB[c], wB, bl);
      }
    }
  };
  if constexpr (kNibbles) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    KVASIR_UNROLL for (int h = 0; h < 4; ++h) {
      const __m512i vA = _mm512_load_si512(blkA + 64 * h);
      const __m512i vB = _mm512_load_si512(blkB + 64 * h);
      group(_mm512_and_si512(vA, low4), _mm512_and_si512(vB, low4), h);
      group(_mm512_and_si512(_mm512_srli_epi16(vA, 4), low4), _mm512_and_si512(_mm512_srli_epi16(vB, 4), low4), h + 4);
    }
  } else {
    KVASIR_UNROLL for (int g = 0; g < 8; ++g) group(_mm512_load_si512(blkA + 64 * g), _mm512_load_si512(blkB + 64 * g), g);
  }
  __m512 dwA, mwA, dwB, mwB;
  block_scales(dA, mA, m_from_d, b, &dwA, &mwA);
  block_scales(dB, mB, m_from_d, b, &dwB, &mwB);
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    const unsigned char* a = act + c * kP * act_stride;
    const float* ds0 = reinterpret_cast<const float*>(a + k) + 2 * b;
    const float* ds1 = kPairs ? reinterpret_cast<const float*>(a + act_stride + k) + 2 * b : ds0;
    __m512i isA = hiA[c], isB = hiB[c];
    if constexpr (kPairs) {
      isA = _mm512_add_epi32(_mm512_slli_epi32(hiA[c], 8), loA[c]);
      isB = _mm512_add_epi32(_mm512_slli_epi32(hiB[c], 8), loB[c]);
    }
    const __m512 dx = _mm512_set1_ps(ds1[0]), s0 = _mm512_set1_ps(ds0[1]);
    PA[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isA), _mm512_mul_ps(dwA, dx), PA[c]);
    PB[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isB), _mm512_mul_ps(dwB, dx), PB[c]);
    PA[c] = _mm512_fmadd_ps(mwA, s0, PA[c]);
    PB[c] = _mm512_fmadd_ps(mwB, s0, PB[c]);
    if constexpr (kPairs) {
      const __m512 s1 = _mm512_set1_ps(ds1[1]);
      PA[c] = _mm512_fmadd_ps(mwA, s1, PA[c]);
      PB[c] = _mm512_fmadd_ps(mwB, s1, PB[c]);
    }
  }
}

template <int C, bool kPairs, bool kNibbles>
KVASIR_INLINE void tile_cols2(const TileArgs& a, int nr, const unsigned char* act, long act_stride, long k, float* y,
                              long ldy) {
  const long nb = k / 32;
  const auto* pA = static_cast<const unsigned char*>(a.w);
  const unsigned char* pB = pA + a.panel_bytes;
  const unsigned char* dA = pA + a.d_offset;
  const unsigned char* dB = pB + a.d_offset;
  const unsigned char* mA = a.m_offset != 0 ? pA + a.m_offset : nullptr;
  const unsigned char* mB = a.m_offset != 0 ? pB + a.m_offset : nullptr;
  const __m512 mfd = _mm512_set1_ps(a.m_from_d);
  __m512 A0[C], A1[C], A2[C], A3[C], B0[C], B1[C], B2[C], B3[C];
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    A0[c] = A1[c] = A2[c] = A3[c] = _mm512_setzero_ps();
    B0[c] = B1[c] = B2[c] = B3[c] = _mm512_setzero_ps();
  }
  constexpr long kB = static_cast<long>(kNibbles ? kPackedNibbleValueBytes : kPackedValueBytes);
  // As tile_cols: the next panels' scales now, each stream kPanelPrefetchBytes ahead as it goes.
  const long pb = static_cast<long>(a.panel_bytes);
  const long scales_end = (mA != nullptr ? a.m_offset : a.d_offset) + nb * 32;
  prefetch_scales(pB + pb, a.d_offset, scales_end);
  prefetch_scales(pB + 2 * pb, a.d_offset, scales_end);
  long b = 0;
  for (; b + 4 <= nb; b += 4) {
    // Past its panel's end, each stream continues in the next pair (its own panel there: one
    // panel further on than the bytes that follow it).
    KVASIR_UNROLL for (long l = 0; l < 4 * kB; l += 64) {
      const long off = b * kB + kPanelPrefetchBytes + l;
      const long at = off < pb ? off : pb + off;
      _mm_prefetch(reinterpret_cast<const char*>(pA + at), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pB + at), _MM_HINT_T0);
    }
    block2<C, kPairs, kNibbles>(pA + b * kB, pB + b * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b, A0, B0);
    block2<C, kPairs, kNibbles>(pA + (b + 1) * kB, pB + (b + 1) * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b + 1, A1, B1);
    block2<C, kPairs, kNibbles>(pA + (b + 2) * kB, pB + (b + 2) * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b + 2, A2, B2);
    block2<C, kPairs, kNibbles>(pA + (b + 3) * kB, pB + (b + 3) * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b + 3, A3, B3);
  }
  if (b < nb) block2<C, kPairs, kNibbles>(pA + b * kB, pB + b * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b, A0, B0);
  if (b + 1 < nb) block2<C, kPairs, kNibbles>(pA + (b + 1) * kB, pB + (b + 1) * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b + 1, A1, B1);
  if (b + 2 < nb) block2<C, kPairs, kNibbles>(pA + (b + 2) * kB, pB + (b + 2) * kB, dA, dB, mA, mB, mfd, act, act_stride, k, b + 2, A2, B2);
  const __mmask16 rowsB = static_cast<__mmask16>((1u << (nr - 16)) - 1u);
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    _mm512_storeu_ps(y + c * ldy, _mm512_add_ps(_mm512_add_ps(A0[c], A2[c]), _mm512_add_ps(A1[c], A3[c])));
    _mm512_mask_storeu_ps(y + c * ldy + 16, rowsB, _mm512_add_ps(_mm512_add_ps(B0[c], B2[c]), _mm512_add_ps(B1[c], B3[c])));
  }
}

// Input rows per register tile: 4 P slots x C accumulators plus C (pairs: 2C) int32 sums; a
// pair of panels: 8 P slots x C plus 2C (pairs: 4C).
constexpr int kCols = 4;
constexpr int kPairCols = 2;
constexpr int kPanelRows = 16;

// One panel (nr <= 16 rows) against every input row, kCols at a time.
template <bool kPairs, bool kNibbles>
void panel_tile(const TileArgs& a, const unsigned char* w, int nr, float* y0) {
  TileArgs p = a;
  p.w = w;
  const auto* act = static_cast<const unsigned char*>(a.act);
  const long as = static_cast<long>(a.act_stride);
  constexpr long kP = kPairs ? 2 : 1;
  const long inputs = a.nc / kP;
  long c = 0;
  for (; c + kCols <= inputs; c += kCols) {
    tile_cols<kCols, kPairs, kNibbles>(p, nr, act + c * kP * as, as, a.k, y0 + c * a.ldy, a.ldy);
  }
  const unsigned char* x = act + c * kP * as;
  float* y = y0 + c * a.ldy;
  switch (inputs - c) {
    case 1: tile_cols<1, kPairs, kNibbles>(p, nr, x, as, a.k, y, a.ldy); break;
    case 2: tile_cols<2, kPairs, kNibbles>(p, nr, x, as, a.k, y, a.ldy); break;
    case 3: tile_cols<3, kPairs, kNibbles>(p, nr, x, as, a.k, y, a.ldy); break;
    default: break;
  }
}

template <bool kPairs, bool kNibbles>
void tile_impl(const TileArgs& a) {
  const auto* w = static_cast<const unsigned char*>(a.w);
  constexpr long kP = kPairs ? 2 : 1;
  const long inputs = a.nc / kP;
  if (a.nr <= kPanelRows) {
    panel_tile<kPairs, kNibbles>(a, w, a.nr, a.y);
    return;
  }
  if (inputs <= kCols) {
    // One pass of kCols inputs per panel hides more of the stream from memory than two passes of
    // kPairCols (small batches are bound by reading the weights).
    panel_tile<kPairs, kNibbles>(a, w, kPanelRows, a.y);
    panel_tile<kPairs, kNibbles>(a, w + a.panel_bytes, a.nr - kPanelRows, a.y + kPanelRows);
    return;
  }
  const auto* act = static_cast<const unsigned char*>(a.act);
  const long as = static_cast<long>(a.act_stride);
  long c = 0;
  for (; c + kPairCols <= inputs; c += kPairCols) {
    tile_cols2<kPairCols, kPairs, kNibbles>(a, a.nr, act + c * kP * as, as, a.k, a.y + c * a.ldy, a.ldy);
  }
  for (; c < inputs; ++c) tile_cols2<1, kPairs, kNibbles>(a, a.nr, act + c * kP * as, as, a.k, a.y + c * a.ldy, a.ldy);
}

template <bool kNibbles>
void packed_tile(const TileArgs& a) {
  if (a.planes == 2) {
    tile_impl<true, kNibbles>(a);
  } else {
    tile_impl<false, kNibbles>(a);
  }
}

}  // namespace

TileFn packed_q32_tile(bool nibbles) { return nibbles ? packed_tile<true> : packed_tile<false>; }

}  // namespace kvasir::cpu::avx512
