#include "backend/cpu/quant/dequantize.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant/blocks.h"
#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/quant_test_util.h"

namespace kvasir::cpu {
namespace {

using testing::random_floats;
using testing::random_weights;
using testing::runnable_isas;

const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ8_1, DType::kQ2_K,
                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};

TEST(Fp16, ToF32MatchesF16cForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_f32(static_cast<fp16_t>(h));
    const float b = _cvtsh_ss(static_cast<unsigned short>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      EXPECT_EQ(bits_from_f32(a), bits_from_f32(b)) << h;
    }
  }
}

TEST(Fp16, FromF32RoundsLikeF16c) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Cover all magnitudes: random bit patterns, then a band around the fp16 range.
    uint32_t u = bits(rng);
    if (i % 2) u = (u & 0x807fffffu) | ((100u + u % 50u) << 23);
    const float f = f32_from_bits(u);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp16(f), _cvtss_sh(f, 0)) << std::hexfloat << f;
  }
}

// Every type, several row lengths: each ISA's fast path reproduces the scalar reference exactly.
TEST(DequantizeRow, SimdMatchesReferenceBitForBit) {
  std::mt19937 rng(7);
  for (DType t : kAllTypes) {
    for (int64_t k : {256, 512, 1280, 4096}) {
      const std::vector<uint8_t> w = random_weights(t, 1, k, rng);
      std::vector<float> ref(static_cast<size_t>(k)), got(static_cast<size_t>(k));
      dequantize_row_ref(t, w.data(), ref.data(), k);
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

// Hand-built blocks pin the layouts to GGML's, independently of the reference code.
TEST(DequantizeRow, KnownBlocksDecodeToGgmlValues) {
  BlockQ4_1 q41{};
  q41.d = f32_to_fp16(0.5f);
  q41.m = f32_to_fp16(-1.0f);
  q41.qs[0] = 0x3a;  // element 0 = 0xa, element 16 = 0x3
  float y[256];
  dequantize_row(DType::kQ4_1, &q41, y, 32);
  EXPECT_EQ(y[0], 0xa * 0.5f - 1.0f);
  EXPECT_EQ(y[16], 3 * 0.5f - 1.0f);
  EXPECT_EQ(y[1], -1.0f);

  BlockQ5_0 q50{};
  q50.d = f32_to_fp16(2.0f);
  q50.qs[1] = 0x21;                // element 1 = 1, element 17 = 2
  const uint32_t qh = (1u << 17);  // fifth bit of element 17
  std::memcpy(q50.qh, &qh, 4);
  dequantize_row(DType::kQ5_0, &q50, y, 32);
  EXPECT_EQ(y[1], (1 - 16) * 2.0f);
  EXPECT_EQ(y[17], (2 + 16 - 16) * 2.0f);

  BlockQ6_K q6{};
  q6.d = f32_to_fp16(1.0f);
  q6.scales[0] = 3;
  q6.scales[4] = -2;
  q6.ql[0] = 0x75;  // element 0 low nibble 5, element 64 low nibble 7
  q6.qh[0] = 0x12;  // element 0 high bits 2 (->32), element 64 high bits 1 (->16)
  dequantize_row(DType::kQ6_K, &q6, y, 256);
  EXPECT_EQ(y[0], 3.0f * static_cast<float>(5 + 32 - 32));
  EXPECT_EQ(y[64], -2.0f * static_cast<float>(7 + 16 - 32));

  BlockQ4_K q4k{};
  q4k.d = f32_to_fp16(1.0f);
  q4k.dmin = f32_to_fp16(1.0f);
  q4k.scales[1] = 2;          // scale of sub-block 1
  q4k.scales[5] = 7;          // min of sub-block 1
  q4k.scales[8] = 0x31;       // sub-block 4: scale low bits 1, min low bits 3
  q4k.scales[0] = 0x80;       // sub-block 4: scale bits 4-5 = 2 -> scale 0x21
  q4k.qs[0] = 0x9f;           // element 0 = 15, element 32 = 9
  q4k.qs[64] = 0x04;          // element 128 (sub-block 4) = 4
  dequantize_row(DType::kQ4_K, &q4k, y, 256);
  EXPECT_EQ(y[32], 2.0f * 9 - 7.0f);
  EXPECT_EQ(y[128], 33.0f * 4 - 3.0f);
}

TEST(QuantizeRow, GgmlQ8FormatsRoundTrip) {
  std::mt19937 rng(3);
  const int64_t k = 512;
  const std::vector<float> x = random_floats(k, rng, -3.0f, 3.0f);
  std::vector<float> back(k);
  {
    std::vector<BlockQ8_0> q(k / 32);
    quantize_row_q8_0(x.data(), q.data(), k);
    dequantize_row(DType::kQ8_0, q.data(), back.data(), k);
    for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(back[i], x[i], fp16_to_f32(q[i / 32].d) * 0.51f + 1e-3f);
  }
  {
    std::vector<BlockQ8_1> q(k / 32);
    quantize_row_q8_1(x.data(), q.data(), k);
    dequantize_row(DType::kQ8_1, q.data(), back.data(), k);
    for (int64_t b = 0; b < k / 32; ++b) {
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[b].qs[j];
      EXPECT_NEAR(fp16_to_f32(q[b].s), fp16_to_f32(q[b].d) * sum, std::fabs(fp16_to_f32(q[b].s)) * 1e-3f + 1e-3f);
    }
    for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(back[i], x[i], fp16_to_f32(q[i / 32].d) * 0.51f + 1e-3f);
  }
  {
    std::vector<BlockQ8_K> q(k / 256);
    quantize_row_q8_K(x.data(), q.data(), k);
    dequantize_row(DType::kQ8_K, q.data(), back.data(), k);
    for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(back[i], x[i], q[i / 256].d * 0.51f);
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += q[0].qs[j];
    EXPECT_EQ(q[0].bsums[0], sum);
  }
}

TEST(QuantizeAct, SimdMatchesReferenceBitForBit) {
  std::mt19937 rng(11);
  for (int64_t k : {256, 768, 4096}) {
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
