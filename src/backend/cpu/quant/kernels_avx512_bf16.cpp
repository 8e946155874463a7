// The AVX-512 BF16 tile for BF16 weights in the 8-bit mode (ActQuant::kQ8): activations rounded to bf16 once per
// call (ActBf16Layout), then `vdpbf16ps` (32 products per instruction, summed in float32 lanes),
// twice the multiply-adds per instruction of the float32 FMA tile that the exact mode keeps. As
// vLLM's CPU backend computes: bf16 operands, float32 accumulation. 4 weight rows x up to 4 input
// rows in registers; each y depends only on its own weight row and input row, in one fixed order,
// so a row of y is the same at any batch size. Built with AVX-512 BF16 flags; called only after
// cpu_has_avx512_bf16(). Must not use the standard library (see simd.inc).
#include <immintrin.h>

#include "backend/cpu/quant/kernels.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::cpu::avx512 {
namespace {

#define KVASIR_INLINE inline __attribute__((always_inline))
#define KVASIR_UNROLL _Pragma("GCC unroll 16")

// The sum of a register's 16 lanes for each of 4 registers, in lanes 0..3 of the result.
KVASIR_INLINE __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
  const __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  const __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
  const __m256 ab = _mm256_hadd_ps(a8, b8), cd = _mm256_hadd_ps(c8, d8);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // lanes: a b c d (low half), a b c d (high half)
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <int C>
KVASIR_INLINE void bf16_rows(const unsigned char* const* rows, int nr, const unsigned char* x, long ldx, long k,
                             float* y, long ldy) {
  __m512 acc[4][C];
  KVASIR_UNROLL for (int r = 0; r < 4; ++r)
    KVASIR_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  auto step = [&](long i, __mmask32 m) __attribute__((always_inline)) {
    __m512i w[4];
    KVASIR_UNROLL for (int r = 0; r < 4; ++r) w[r] = _mm512_maskz_loadu_epi16(m, rows[r] + 2 * i);
    KVASIR_UNROLL for (int c = 0; c < C; ++c) {
      const __m512i xv = _mm512_maskz_loadu_epi16(m, x + c * ldx + 2 * i);
      KVASIR_UNROLL for (int r = 0; r < 4; ++r) {
        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], reinterpret_cast<__m512bh>(w[r]), reinterpret_cast<__m512bh>(xv));
      }
    }
  };
  long i = 0;
  for (; i + 32 <= k; i += 32) {
    KVASIR_UNROLL for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + 2 * i + 512), _MM_HINT_T0);
    step(i, 0xffffffffu);
  }
  if (i < k) step(i, static_cast<__mmask32>((1ull << (k - i)) - 1));
  KVASIR_UNROLL for (int c = 0; c < C; ++c) {
    alignas(16) float t[4];
    _mm_store_ps(t, hsum4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
    for (int r = 0; r < nr; ++r) y[c * ldy + r] = t[r];
  }
}

constexpr int kCols = 4;

void bf16_tile(const TileArgs& a) {
  const unsigned char* rows[4];
  for (int r = 0; r < 4; ++r) rows[r] = a.w + (r < a.nr ? r : a.nr - 1) * a.w_stride;
  const auto* x = static_cast<const unsigned char*>(a.act);
  const long ldx = static_cast<long>(a.act_stride);
  long c = 0;
  for (; c + kCols <= a.nc; c += kCols) bf16_rows<kCols>(rows, a.nr, x + c * ldx, ldx, a.k, a.y + c * a.ldy, a.ldy);
  switch (a.nc - c) {
    case 1: bf16_rows<1>(rows, a.nr, x + c * ldx, ldx, a.k, a.y + c * a.ldy, a.ldy); break;
    case 2: bf16_rows<2>(rows, a.nr, x + c * ldx, ldx, a.k, a.y + c * a.ldy, a.ldy); break;
    case 3: bf16_rows<3>(rows, a.nr, x + c * ldx, ldx, a.k, a.y + c * a.ldy, a.ldy); break;
    default: break;
  }
}

// Round to nearest even (vcvtneps2bf16), 16 values at a time; the tail through a mask. The bytes
// past k up to the row's 64-byte end are zeroed so no uninitialized byte is ever read.
void quantize_bf16(const float* x, int64_t k, uint8_t* row) {
  auto* out = reinterpret_cast<unsigned char*>(row);
  long i = 0;
  for (; i + 16 <= k; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i))));
  }
  if (i < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
    const __m256i v = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    _mm256_mask_storeu_epi16(out + 2 * i, m, v);
  }
  const long end = static_cast<long>(ActBf16Layout::row_bytes(k));
  for (long b = 2 * k; b < end; ++b) out[b] = 0;
}

}  // namespace

TileFn bf16_tile_fn() { return bf16_tile; }
QuantActFn quantize_act_bf16_fn() { return quantize_bf16; }

}  // namespace kvasir::cpu::avx512
