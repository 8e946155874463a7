// FP8 conversions against PyTorch's casts (tests/data/quant/fp8_golden.json, written by
// scripts/gen_fp8_golden.py): all 256 codes of each format decode to torch's float32 bit for bit,
// and float32 inputs (every value, every tie between neighbours and points just off it, random
// values over all binades) encode to torch's code.
#include "quant/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/json.h"
#include "common/mapped_file.h"
#include "quant/dequantize.h"
#include "quant/fp8_activations.h"

namespace kvasir::quant {
namespace {

Json golden() {
  auto text = read_text_file(std::string(KVASIR_SOURCE_DIR) + "/tests/data/quant/fp8_golden.json");
  EXPECT_TRUE(text.ok()) << text.status().message();
  auto j = parse_json(text.ok() ? *text : "{}");
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json();
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check_format(const Json& g, float (*decode)(uint8_t), uint8_t (*encode)(float), DType dtype) {
  const auto& dec = g.find("decode_f32_bits")->as_array();
  ASSERT_EQ(dec.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float want = f32_from_bits(static_cast<uint32_t>(dec[static_cast<size_t>(c)].as_int()));
    const float got = decode(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(f32_bits(got), f32_bits(want)) << "code " << c << ": " << got << " vs torch " << want;
    }
    // The reference dequantizer reads the same table.
    const auto code = static_cast<uint8_t>(c);
    float row = 0.0f;
    dequantize_row(dtype, &code, &row, 1);
    EXPECT_TRUE(std::isnan(want) ? std::isnan(row) : f32_bits(row) == f32_bits(want)) << "code " << c;
  }
  const auto& in = g.find("encode_inputs_f32_bits")->as_array();
  const auto& codes = g.find("encode_codes")->as_array();
  ASSERT_EQ(in.size(), codes.size());
  ASSERT_GT(in.size(), 1000u);
  int wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float x = f32_from_bits(static_cast<uint32_t>(in[i].as_int()));
    const int got = encode(x), want = static_cast<int>(codes[i].as_int());
    if (got != want && ++wrong <= 10) ADD_FAILURE() << "encode(" << x << ") = " << got << ", torch " << want;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(Fp8, E4m3MatchesTorchOnEveryCodeAndTie) {
  const Json g = golden();
  check_format(*g.find("e4m3fn"), fp8_e4m3_to_f32, f32_to_fp8_e4m3, DType::kF8E4M3);
}

TEST(Fp8, E5m2MatchesTorchOnEveryCodeAndTie) {
  const Json g = golden();
  check_format(*g.find("e5m2"), fp8_e5m2_to_f32, f32_to_fp8_e5m2, DType::kF8E5M2);
}

TEST(Fp8, OverflowSaturatesAndNanStaysNan) {
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-470.0f), 0xfe);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), kFp8E4m3Max);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(NAN))));
  EXPECT_EQ(f32_to_fp8_e5m2(INFINITY), 0x7b);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), kFp8E5m2Max);
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
}

TEST(Fp8, DTypeTableKnowsBothFormats) {
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "f8_e4m3");
  EXPECT_EQ(*row_bytes(DType::kF8E5M2, 7), 7u);
  EXPECT_TRUE(dequantize_supported(DType::kF8E4M3));
}

float round_on(float x, float s) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(x / s)) * s; }

TEST(Fp8Activations, StaticScaleRoundsEveryValueOnIt) {
  const float x[4] = {1.3f, -0.3f, 1000.0f, 0.0f};
  float out[4];
  InputQuant q;
  q.kind = InputQuant::Kind::kStaticTensor;
  q.scale = 0.5f;
  fake_quantize_fp8_rows(x, 1, 4, q, out);
  EXPECT_EQ(out[0], 1.25f);  // 2.6 -> 2.5 (steps of 0.25 in [2, 4))
  EXPECT_EQ(out[1], round_on(-0.3f, 0.5f));
  EXPECT_EQ(out[2], 448.0f * 0.5f);  // saturates, as the clamp before the cast
  EXPECT_EQ(out[3], 0.0f);
}

TEST(Fp8Activations, DynamicTokenScalesEachRowByItsMax) {
  const float x[6] = {448.0f, 1.3f, -2.0f, 0.0f, 0.0f, 0.0f};
  float out[6];
  InputQuant q;
  q.kind = InputQuant::Kind::kDynamicToken;
  fake_quantize_fp8_rows(x, 2, 3, q, out);
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_EQ(out[1], 1.25f);  // scale 1: 1.3 -> 1.25 (steps of 0.125 in [1, 2))
  EXPECT_EQ(out[2], -2.0f);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(out[i], 0.0f);  // an all-zero row stays zero
}

TEST(Fp8Activations, DynamicGroupScalesEachGroupByItsMax) {
  float x[4] = {5.0f, 0.3f, 8.0f, 0.3f};
  InputQuant q;
  q.kind = InputQuant::Kind::kDynamicGroup;
  q.group_size = 2;
  const float want[4] = {5.0f, round_on(0.3f, 5.0f / 448.0f), 8.0f, round_on(0.3f, 8.0f / 448.0f)};
  EXPECT_NE(want[1], want[3]);  // one scale for the row would round both 0.3s alike
  fake_quantize_fp8_rows(x, 1, 4, q, x);  // in place
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x[i], want[i]) << i;
}

}  // namespace
}  // namespace kvasir::quant
