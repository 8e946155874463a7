// The CPU FP8 KV-cache conversions (fp8_cache_codes.h) against quant/fp8.h's scalar references,
// which tests/data/quant/fp8_golden.json ties to PyTorch's casts: every code widens to the same
// float32 (vector and scalar loads, NaN included), and float32 inputs encode to the same code:
// every FP8 value, every tie between neighbours and the floats just off it, saturation past the
// largest finite value, infinities, NaN, and random values over all binades.
#include "backend/cpu/fp8_cache_codes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/fp8.h"

namespace kvasir::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Same float32 bits, or both NaN with the same sign.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return bits(a) == bits(b);
}

template <typename Code>
void expect_widening_exact(float (*reference)(uint8_t)) {
  std::vector<Code> codes(256 + 8);
  for (int c = 0; c < 256; ++c) codes[static_cast<size_t>(c)].bits = static_cast<uint8_t>(c);
  for (int c = 0; c < 256; c += 8) {
    float v[8];
    _mm256_storeu_ps(v, load8(codes.data() + c));
    for (int i = 0; i < 8; ++i) {
      const uint8_t code = static_cast<uint8_t>(c + i);
      EXPECT_TRUE(same(v[i], reference(code))) << "code " << int{code} << ": " << v[i] << " vs " << reference(code);
      EXPECT_TRUE(same(load1(&codes[static_cast<size_t>(code)]), reference(code))) << "code " << int{code};
    }
  }
}

TEST(Fp8CacheCodes, E4m3WideningIsExact) { expect_widening_exact<E4m3Code>(quant::fp8_e4m3_to_f32); }
TEST(Fp8CacheCodes, E5m2WideningIsExact) { expect_widening_exact<E5m2Code>(quant::fp8_e5m2_to_f32); }

// Inputs that exercise every rounding decision: each value, its neighbours' midpoints and the
// floats one ulp either side, over both signs; then random floats of every binade.
std::vector<float> encoding_inputs(float (*decode)(uint8_t)) {
  std::vector<float> in;
  std::vector<float> values;
  for (int c = 0; c < 128; ++c) {
    const float v = decode(static_cast<uint8_t>(c));
    if (std::isfinite(v)) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < values.size(); ++i) {
    in.push_back(values[i]);
    if (i + 1 < values.size()) {
      const float mid = (values[i] + values[i + 1]) / 2;  // exact: one more mantissa bit
      in.push_back(mid);
      in.push_back(std::nextafter(mid, 0.0f));
      in.push_back(std::nextafter(mid, INFINITY));
    }
  }
  const float top = values.back();
  for (float x : {top * 1.03f, top * 1.0625f, top * 1.07f, top * 2, 1e30f, 3.4e38f, INFINITY, 1e-45f, 1e-30f}) in.push_back(x);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    float f;
    const uint32_t u = any(rng) & 0x7fffffffu;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) in.push_back(f);
  }
  std::uniform_real_distribution<float> near(-2 * top, 2 * top);
  for (int i = 0; i < 200000; ++i) in.push_back(near(rng));
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) in.push_back(-in[i]);
  in.push_back(NAN);
  in.push_back(-NAN);
  return in;
}

TEST(Fp8CacheCodes, E4m3EncodingMatchesTheReference) {
  int checked = 0;
  for (float x : encoding_inputs(quant::fp8_e4m3_to_f32)) {
    ASSERT_EQ(int{f32_to_e4m3_code(x)}, int{quant::f32_to_fp8_e4m3(x)}) << "x = " << x << " (bits " << std::hex << bits(x) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 790000);
}

TEST(Fp8CacheCodes, E5m2EncodingMatchesTheReference) {
  for (float x : encoding_inputs(quant::fp8_e5m2_to_f32)) {
    ASSERT_EQ(int{f32_to_e5m2_code(x)}, int{quant::f32_to_fp8_e5m2(x)}) << "x = " << x << " (bits " << std::hex << bits(x) << ")";
  }
}

TEST(Fp8CacheCodes, SaturatesAndKeepsNan) {
  // vLLM's cache write saturates (__NV_SATFINITE): past the largest finite value, infinities too.
  EXPECT_EQ(f32_to_e4m3_code(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_code(1e6f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_code(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e5m2_code(INFINITY), 0x7b);
  EXPECT_EQ(f32_to_e5m2_code(-7e4f), 0xfb);
  E4m3Code n4{f32_to_e4m3_code(NAN)};
  E5m2Code n5{f32_to_e5m2_code(NAN)};
  EXPECT_TRUE(std::isnan(load1(&n4)));
  EXPECT_TRUE(std::isnan(load1(&n5)));
  // Round trip: every finite code survives encode(decode(code)).
  for (int c = 0; c < 256; ++c) {
    E4m3Code a{static_cast<uint8_t>(c)};
    E5m2Code b{static_cast<uint8_t>(c)};
    if (std::isfinite(load1(&a))) {
      EXPECT_EQ(int{f32_to_e4m3_code(load1(&a))}, c);
    }
    if (std::isfinite(load1(&b))) {
      EXPECT_EQ(int{f32_to_e5m2_code(load1(&b))}, c);
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
