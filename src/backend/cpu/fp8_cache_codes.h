// FP8 KV-cache codes on the CPU (--kv-cache-dtype fp8 / fp8_e4m3 / fp8_e5m2): the fast
// conversions write_kv and attention use, equal bit for bit to quant/fp8.h's scalar references
// (and so to CUDA's __nv_cvt_float_to_fp8 with __NV_SATFINITE and its fp8 -> half widening).
// Encoding rounds to nearest even, saturates at the largest finite value (vLLM's cache writes
// saturate), keeps NaN; widening is exact: an e4m3fn code is a float16 pattern shifted by 7
// and scaled by 2^8, an e5m2 code is a float16's top byte. Scales are the callers' business.
// Include only from files built with AVX2 + F16C.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvasir::cpu {

// Storage tags: one byte each; the type says how to widen it.
struct E4m3Code {
  uint8_t bits;
};
struct E5m2Code {
  uint8_t bits;
};

// float32 -> FP8 with M mantissa bits and exponent bias B; max_code is the largest finite code.
template <int M, int B, uint32_t MaxCode>
inline uint8_t f32_to_fp8_code(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);  // NaN (both formats' 0x7f)
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 + 1 - B) << 23;
  uint32_t code;
  if (a < kMinNormal) {
    // Subnormal steps of 2^(1 - B - M): a scaled by a power of two (exact), rounded to even.
    float f;
    std::memcpy(&f, &a, sizeof f);
    constexpr float kSteps = static_cast<float>(uint64_t{1} << (M - 1 + B));
    code = static_cast<uint32_t>(_mm_cvtss_si32(_mm_round_ss(_mm_setzero_ps(), _mm_set_ss(f * kSteps),
                                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  } else {
    // Drop 23 - M mantissa bits, ties to even; a carry moves into the exponent, as it should.
    constexpr int kShift = 23 - M;
    const uint32_t r = (a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1)) >> kShift;
    code = r - (static_cast<uint32_t>(127 - B) << M);
  }
  if (code > MaxCode) code = MaxCode;  // past the largest finite, infinity included: saturate
  return static_cast<uint8_t>(sign | code);
}

inline uint8_t f32_to_e4m3_code(float x) { return f32_to_fp8_code<3, 7, 0x7e>(x); }
inline uint8_t f32_to_e5m2_code(float x) { return f32_to_fp8_code<2, 15, 0x7b>(x); }

// Eight codes as float16 patterns (value x 2^-8 for e4m3, exact for e5m2) in 16-bit lanes.
inline __m128i e4m3_codes_to_half8(__m128i c16) {
  const __m128i mag = _mm_and_si128(c16, _mm_set1_epi16(0x7f));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(c16, _mm_set1_epi16(0x80)), 8);
  __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), sign);
  // 0x7f / 0xff are e4m3fn's NaN; shifted they would read 480 x 2^-8: make them a float16 NaN.
  const __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
  return _mm_blendv_epi8(h, _mm_or_si128(sign, _mm_set1_epi16(0x7e00)), nan);
}

inline __m256 load8(const E4m3Code* p) {
  const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_mul_ps(_mm256_cvtph_ps(e4m3_codes_to_half8(c)), _mm256_set1_ps(256.0f));
}
inline __m256 load8(const E5m2Code* p) {
  const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_slli_epi16(c, 8));
}
inline float load1(const E4m3Code* p) {
  const uint16_t mag = p->bits & 0x7f, sign = static_cast<uint16_t>((p->bits & 0x80) << 8);
  const uint16_t h = mag == 0x7f ? static_cast<uint16_t>(sign | 0x7e00) : static_cast<uint16_t>(sign | (mag << 7));
  return _cvtsh_ss(h) * 256.0f;
}
inline float load1(const E5m2Code* p) { return _cvtsh_ss(static_cast<uint16_t>(p->bits << 8)); }

}  // namespace kvasir::cpu
