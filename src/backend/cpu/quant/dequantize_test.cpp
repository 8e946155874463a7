// The CPU fast paths against the reference of src/quant: dequantizers and activation quantizers,
// every instruction set this machine runs.
#include "backend/cpu/quant/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {

using quant::bits_from_f32;
using testing::random_floats;
using testing::random_weights;
using testing::runnable_isas;

const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ8_1, DType::kQ2_K,
                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};

// Every type, several row lengths: each ISA's fast path reproduces the scalar reference exactly.
TEST(DequantizeRow, SimdMatchesReferenceBitForBit) {
  std::mt19937 rng(7);
  for (DType t : kAllTypes) {
    for (int64_t k : {256, 512, 1280, 4096}) {
      const std::vector<uint8_t> w = random_weights(t, 1, k, rng);
      std::vector<float> ref(static_cast<size_t>(k)), got(static_cast<size_t>(k));
      quant::dequantize_row(t, w.data(), ref.data(), k);
      for (CpuIsa isa : runnable_isas()) {
        std::fill(got.begin(), got.end(), -1.0f);
        dequantize_row(isa, t, w.data(), got.data(), k);
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_TRUE(std::isfinite(ref[i])) << dtype_name(t);
          ASSERT_EQ(bits_from_f32(ref[i]), bits_from_f32(got[i]))
              << dtype_name(t) << " isa=" << isa_name(isa) << " k=" << k << " i=" << i << " ref=" << ref[i]
              << " got=" << got[i];
        }
      }
    }
  }
}

TEST(QuantizeAct, SimdMatchesReferenceBitForBit) {
  std::mt19937 rng(11);
  for (int64_t k : {256, 576, 768, 1536, 4096}) {
    std::vector<float> x = random_floats(static_cast<size_t>(k), rng, -4.0f, 4.0f);
    for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block: d = 0
    x[40] = 0.5f / 127.0f * 3.0f;                                   // a tie-breaking candidate
    for (CpuIsa isa : runnable_isas()) {
      const KernelSet& ks = kernel_set(isa);
      // fmt 0/1: int8 Act32/ActK rows; 2/3: the same layouts as 16-bit (hi, lo) plane pairs.
      for (int fmt = 0; fmt < 4; ++fmt) {
        const size_t bytes = (fmt % 2 == 0 ? Act32Layout::row_bytes(k) : ActKLayout::row_bytes(k)) * (fmt < 2 ? 1 : 2);
        std::vector<uint8_t> ref(bytes, 0), got(bytes, 0);
        if (fmt == 0) {
          quantize_act32_ref(x.data(), k, ref.data());
          ks.quantize_act32(x.data(), k, got.data());
        } else if (fmt == 1) {
          quantize_actk_ref(x.data(), k, ref.data());
          ks.quantize_actk(x.data(), k, got.data());
        } else if (fmt == 2) {
          quantize_act32_planes_ref(x.data(), k, ref.data());
          ks.quantize_act32_planes(x.data(), k, got.data());
        } else {
          quantize_actk_planes_ref(x.data(), k, ref.data());
          ks.quantize_actk_planes(x.data(), k, got.data());
        }
        EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), bytes)) << "fmt=" << fmt << " k=" << k << " " << isa_name(isa);
      }
    }
  }
}

// The two int8 planes hold a 16-bit quantization: hi and lo within [-127, 127] (the AVX2 Q8_0
// kernel relies on it) and d_hi * hi + d_lo * lo within half a step (d_lo) of x, 1.5 steps where
// the split nudged q by one.
TEST(QuantizeAct, PlanesReconstructWithin16BitStep) {
  std::mt19937 rng(12);
  const int64_t k = 512;
  std::vector<float> x = random_floats(static_cast<size_t>(k), rng, -3.0f, 3.0f);
  x[5] = 3.0f;  // the block maximum exactly
  for (int fmt = 0; fmt < 2; ++fmt) {
    const size_t rb = fmt == 0 ? Act32Layout::row_bytes(k) : ActKLayout::row_bytes(k);
    std::vector<uint8_t> row(2 * rb);
    if (fmt == 0) {
      quantize_act32_planes_ref(x.data(), k, row.data());
    } else {
      quantize_actk_planes_ref(x.data(), k, row.data());
    }
    const auto* hi = reinterpret_cast<const int8_t*>(row.data());
    const auto* lo = reinterpret_cast<const int8_t*>(row.data() + rb);
    for (int64_t i = 0; i < k; ++i) {
      const float d_hi = fmt == 0 ? Act32Layout::ds(row.data(), k)[i / 32 * 2] : ActKLayout::d(row.data(), k)[i / 256];
      const float d_lo =
          fmt == 0 ? Act32Layout::ds(row.data() + rb, k)[i / 32 * 2] : ActKLayout::d(row.data() + rb, k)[i / 256];
      ASSERT_EQ(d_hi, 256.0f * d_lo);
      ASSERT_LE(std::abs(hi[i]), 127);
      ASSERT_LE(std::abs(lo[i]), 127);
      EXPECT_NEAR(d_hi * hi[i] + d_lo * lo[i], x[i], 1.51f * d_lo + 1e-6f) << "fmt=" << fmt << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
