// e^x for 8 floats at once (AVX2 + FMA; include only from files built with -mavx2 -mfma): the
// CPU ops' exponentials (softmax, SiLU) without a libm call per element.
#pragma once

#include <immintrin.h>

namespace kvasir::cpu {

// The constants of the polynomial below. Every width's copy of it (exp16 in
// attention_kernels_avx512.cpp, which may not share inline functions with AVX2 files) reads them
// from here and runs the same ops in the same order, so each lane rounds identically.
namespace exp_poly {
inline constexpr float kMin = -87.0f, kMax = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // Cody-Waite split of ln 2
inline constexpr float kC5 = 1.9875691500e-4f, kC4 = 1.3981999507e-3f, kC3 = 8.3334519073e-3f,
                       kC2 = 4.1665795894e-2f, kC1 = 1.6666665459e-1f, kC0 = 5.0000001201e-1f;
}  // namespace exp_poly

// Within ~2 ulp of expf for x in [-87, 88] (inputs outside are clamped there, which keeps 2^n a
// normal float: e^-87 ~ 1.6e-38, e^88 ~ 1.7e38). Cody-Waite reduction by ln 2, then Cephes'
// degree-6 polynomial for expf.
inline __m256 exp8(__m256 x) {
  using namespace exp_poly;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMin)), _mm256_set1_ps(kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC5);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC0));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace kvasir::cpu
