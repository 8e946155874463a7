// FP8 <-> float32, written from the bit layouts (sign | exponent | mantissa) so that one routine
// serves both formats; frexp/ldexp scale by powers of two, which is exact, and nearbyint rounds
// ties to even under the default rounding mode.
#include "quant/fp8.h"

#include <cmath>

namespace kvasir::quant {
namespace {

struct Fp8Layout {
  int mantissa_bits;
  int bias;
  float max_finite;
  uint8_t max_finite_code;  // without sign
  uint8_t nan_code;         // without sign
};

constexpr Fp8Layout kE4m3{3, 7, kFp8E4m3Max, 0x7e, 0x7f};
constexpr Fp8Layout kE5m2{2, 15, kFp8E5m2Max, 0x7b, 0x7f};

float decode(uint8_t code, const Fp8Layout& f, bool has_inf) {
  const bool neg = (code & 0x80) != 0;
  const int mbits = f.mantissa_bits;
  const int exp = (code & 0x7f) >> mbits;
  const int man = code & ((1 << mbits) - 1);
  const int max_exp = (1 << (7 - mbits)) - 1;
  float v;
  if (has_inf && exp == max_exp) {
    v = man == 0 ? INFINITY : NAN;
  } else if (!has_inf && exp == max_exp && man == (1 << mbits) - 1) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), 1 - f.bias - mbits);
  } else {
    v = std::ldexp(static_cast<float>(man + (1 << mbits)), exp - f.bias - mbits);
  }
  return neg ? -v : v;
}

uint8_t encode(float x, const Fp8Layout& f) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | f.nan_code);
  const float a = std::fabs(x);
  if (a >= f.max_finite) return static_cast<uint8_t>(sign | f.max_finite_code);
  const int mbits = f.mantissa_bits;
  const int min_normal_exp = 1 - f.bias;  // unbiased exponent of the smallest normal
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  const int unbiased = e2 - 1;
  int code;
  if (a == 0.0f || unbiased < min_normal_exp) {
    // Subnormal steps of 2^(min_normal_exp - mbits); rounding up to 2^mbits steps gives the
    // smallest normal's code, which is the right answer.
    code = static_cast<int>(std::nearbyint(std::ldexp(a, mbits - min_normal_exp)));
  } else {
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, mbits - unbiased)));  // in [2^mbits, 2^(mbits+1)]
    code = ((unbiased + f.bias) << mbits) + (q - (1 << mbits));  // q = 2^(mbits+1) carries into the exponent
  }
  if (code > f.max_finite_code) code = f.max_finite_code;  // rounded past the largest finite
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t code) { return decode(code, kE4m3, false); }
float fp8_e5m2_to_f32(uint8_t code) { return decode(code, kE5m2, true); }
uint8_t f32_to_fp8_e4m3(float x) { return encode(x, kE4m3); }
uint8_t f32_to_fp8_e5m2(float x) { return encode(x, kE5m2); }

}  // namespace kvasir::quant
