// Vector helpers over KV-cache rows, shared by the CPU attention ops (cpu_attention.cpp and
// cpu_mla_attention.cpp): the cache holds float32, float16 or FP8 codes (--kv-cache-dtype; the
// FP8 tags and their widening are fp8_cache_codes.h's), widened to float32 here (AVX2 + FMA +
// F16C; include only from files built with those flags). An FP8 row widens to its codes' values:
// the caller applies the tensor's scale.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/fp8_cache_codes.h"

namespace kvasir::cpu {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return _cvtsh_ss(*p); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// a . b over n values; two accumulators, so a row of 16 or more keeps both FMA ports busy.
template <typename T>
float dot(const float* a, const T* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), load8(b + d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), load8(b + d + 8), acc1);
  }
  for (; d + 8 <= n; d += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), load8(b + d), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; d < n; ++d) s += a[d] * load1(b + d);
  return s;
}

// a . rows[i] for eight rows of n values (n a multiple of 8), in lane i: one accumulator per row,
// so eight independent FMA chains, and the eight sums reduced together (9 shuffles and adds,
// where eight dot() calls spend ~6 each).
template <typename T>
__m256 dot8(const float* a, const T* const* rows, int64_t n) {
  // Unrolled by pragma: GCC at -O2 would keep acc on the stack.
  __m256 acc[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t d = 0; d < n; d += 8) {
    const __m256 av = _mm256_loadu_ps(a + d);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(av, load8(rows[i] + d), acc[i]);
  }
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  // Each h holds its four rows' sums of the low lanes, then of the high lanes.
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// y += w * x
template <typename T>
void axpy(float w, const T* x, float* y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(y + d, _mm256_fmadd_ps(wv, load8(x + d), _mm256_loadu_ps(y + d)));
  for (; d < n; ++d) y[d] += w * load1(x + d);
}

}  // namespace kvasir::cpu
