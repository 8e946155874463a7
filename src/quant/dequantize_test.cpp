// The reference conversions pinned down independently of their own code: fp16 against the F16C
// instructions, hand-built blocks against GGML's values, the Q8 quantizers by round trip, and the
// block structs against core/dtype.h's sizes.
#include "quant/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/block_formats.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kvasir::quant {
namespace {

#if defined(__F16C__)
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
#endif  // __F16C__

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
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> x(k);
  for (float& f : x) f = dist(rng);
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

template <typename Block>
void expect_block_matches_dtype(DType t) {
  const auto info = dtype_info(t);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(sizeof(Block), info->type_size) << info->name;
  EXPECT_TRUE(info->quantized) << info->name;
  EXPECT_TRUE(dequantize_supported(t)) << info->name;
}

TEST(BlockFormats, StructsMatchDTypeTable) {
  expect_block_matches_dtype<BlockQ4_0>(DType::kQ4_0);
  expect_block_matches_dtype<BlockQ4_1>(DType::kQ4_1);
  expect_block_matches_dtype<BlockQ5_0>(DType::kQ5_0);
  expect_block_matches_dtype<BlockQ5_1>(DType::kQ5_1);
  expect_block_matches_dtype<BlockQ8_0>(DType::kQ8_0);
  expect_block_matches_dtype<BlockQ8_1>(DType::kQ8_1);
  expect_block_matches_dtype<BlockQ2_K>(DType::kQ2_K);
  expect_block_matches_dtype<BlockQ3_K>(DType::kQ3_K);
  expect_block_matches_dtype<BlockQ4_K>(DType::kQ4_K);
  expect_block_matches_dtype<BlockQ5_K>(DType::kQ5_K);
  expect_block_matches_dtype<BlockQ6_K>(DType::kQ6_K);
  expect_block_matches_dtype<BlockQ8_K>(DType::kQ8_K);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ8_1}) {
    EXPECT_EQ(dtype_info(t)->block_size, static_cast<uint32_t>(kQK32)) << dtype_name(t);
  }
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    EXPECT_EQ(dtype_info(t)->block_size, static_cast<uint32_t>(kQKK)) << dtype_name(t);
  }
  EXPECT_FALSE(dequantize_supported(DType::kI32));
}

}  // namespace
}  // namespace kvasir::quant
