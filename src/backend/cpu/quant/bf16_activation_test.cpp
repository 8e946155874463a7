// The 8-bit mode's BF16-weight path (kernels_avx512_bf16.cpp): its activation rounding must equal
// the scalar reference bit for bit, special values and row tails included. (Its products are
// checked against a double reference, and for batch invariance, by matmul_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/quant/cpu_isa.h"
#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "quant/block_formats.h"

namespace kvasir::cpu {
namespace {

float from_bits(uint32_t u) { return quant::f32_from_bits(u); }

TEST(Bf16Activations, SimdRoundingEqualsReferenceBitwise) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU: the fast path keeps float32 activations";
  std::mt19937 rng(20);
  std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                                from_bits(0x7f800001u),  // signalling NaN
                                from_bits(0x3f808000u),  // a tie, rounds down to even
                                from_bits(0x3f818000u),  // a tie, rounds up to even
                                from_bits(0x3f80ffffu), from_bits(0x7f7fffffu),  // rounds to infinity
                                1e-30f, -3.4e38f};
  for (int64_t k : {1, 7, 15, 16, 17, 32, 576, 1000, 1537}) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(k), rng, -50.0f, 50.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 3 == 0) x[i] = special[(i / 3) % special.size()];
    }
    const size_t bytes = ActBf16Layout::row_bytes(k);
    std::vector<uint8_t> want(bytes, 0xAB), got(bytes, 0xCD);
    quantize_act_bf16_ref(x.data(), k, want.data());
    avx512::quantize_act_bf16_fn()(x.data(), k, got.data());
    for (size_t b = 0; b < bytes; b += 2) {
      uint16_t w, g;
      std::memcpy(&w, want.data() + b, 2);
      std::memcpy(&g, got.data() + b, 2);
      ASSERT_EQ(w, g) << "k=" << k << " element " << b / 2
                      << (b / 2 < static_cast<size_t>(k) ? " of " + std::to_string(x[b / 2]) : " (padding)");
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
