#include "quant/packed_int_blocks.h"

#include <gtest/gtest.h>

#include "quant/dequantize.h"
#include "quant/packed_int_tensors.h"
#include "quant/packed_int_test_util.h"

namespace kvasir::quant {
namespace {

using testing::IntLayer;
using testing::MemoryWeightSource;

const std::string kLayer = "model.layers.0.self_attn.o_proj";

IntWeightScheme scheme(IntWeightLayout layout, int bits, int64_t group, bool desc_act, bool sym) {
  IntWeightScheme s;
  s.layout = layout;
  s.bits = bits;
  s.group_size = group;
  s.desc_act = desc_act;
  s.sym = sym;
  return s;
}

// The blocks dequantize (quant's reference) to exactly the float32 dequantization.
void expect_blocks_equal_floats(const PackedIntWeight& w, DType format) {
  const size_t row = row_bytes(format, w.in_features).value();
  std::vector<uint8_t> blocks(row * static_cast<size_t>(w.out_features));
  packed_int_to_blocks(w, format, blocks.data());
  std::vector<float> want(static_cast<size_t>(w.out_features * w.in_features));
  dequantize_packed_int(w, want.data());
  std::vector<float> got(static_cast<size_t>(w.in_features));
  for (int64_t o = 0; o < w.out_features; ++o) {
    dequantize_row(format, blocks.data() + static_cast<size_t>(o) * row, got.data(), w.in_features);
    for (int64_t k = 0; k < w.in_features; ++k) {
      ASSERT_EQ(got[static_cast<size_t>(k)], want[static_cast<size_t>(o * w.in_features + k)]) << "row " << o << " column " << k;
    }
  }
}

TEST(PackedIntBlocks, FourBitSymmetricIsQ4_0AndTheRestQ8_0ExactlyAlike) {
  struct Case {
    IntWeightLayout layout;
    int bits;
    int64_t group;
    bool sym;
    DType want;
  };
  for (const Case& c : {Case{IntWeightLayout::kGptq, 4, 64, true, DType::kQ4_0}, Case{IntWeightLayout::kGptq, 4, 32, false, DType::kQ8_0},
                        Case{IntWeightLayout::kGptq, 8, 128, true, DType::kQ8_0}, Case{IntWeightLayout::kAwqGemm, 4, 64, false, DType::kQ8_0},
                        Case{IntWeightLayout::kPackQuantized, 4, 32, true, DType::kQ4_0},
                        Case{IntWeightLayout::kPackQuantized, 8, -1, true, DType::kQ8_0},
                        Case{IntWeightLayout::kPackQuantized, 4, -1, false, DType::kQ8_0}}) {
    SCOPED_TRACE(std::string(int_weight_layout_name(c.layout)) + " bits " + std::to_string(c.bits) + " group " +
                 std::to_string(c.group) + (c.sym ? " sym" : " asym"));
    const IntLayer l = testing::random_layer(c.bits, 16, 256, c.group == -1 ? 256 : c.group, false, 21, c.sym);
    MemoryWeightSource src;
    if (c.layout == IntWeightLayout::kGptq) testing::add_gptq(src, kLayer, l, 0);
    if (c.layout == IntWeightLayout::kAwqGemm) testing::add_awq(src, kLayer, l);
    if (c.layout == IntWeightLayout::kPackQuantized) testing::add_pack_quantized(src, kLayer, l, c.sym);
    auto w = read_packed_int_weight(src, kLayer, scheme(c.layout, c.bits, c.group, false, c.sym));
    ASSERT_TRUE(w.ok()) << w.status().message();
    ASSERT_EQ(exact_block_format(*w), c.want);
    expect_blocks_equal_floats(*w, c.want);
  }
}

TEST(PackedIntBlocks, WhatNoBlockHoldsExactlyStaysFloat) {
  {  // act-order: a 32-column block spans several groups
    const IntLayer l = testing::random_layer(4, 16, 128, 32, true, 3);
    MemoryWeightSource src;
    testing::add_gptq(src, kLayer, l, 0);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, 4, 32, true, false));
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(exact_block_format(*w), std::nullopt);
  }
  {  // 8-bit zeros other than 128: q - zero leaves int8
    const IntLayer l = testing::random_layer(8, 16, 128, 32, false, 4);
    MemoryWeightSource src;
    testing::add_gptq(src, kLayer, l, 0);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, 8, 32, false, false));
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(exact_block_format(*w), std::nullopt);
  }
  {  // groups of 16 columns: a block holds two scales
    const IntLayer l = testing::random_layer(4, 16, 128, 16, false, 5, true);
    MemoryWeightSource src;
    testing::add_gptq(src, kLayer, l, 0);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, 4, 16, false, true));
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(exact_block_format(*w), std::nullopt);
  }
  {  // a float32 scale fp16 cannot hold
    const IntLayer l = testing::random_layer(4, 16, 64, 32, false, 6, true);
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, true);
    std::vector<uint8_t> scales(16 * 2 * 4);
    const float odd = 1.0f + 1.0f / 4096.0f;  // 13 significant bits
    for (size_t i = 0; i < 32; ++i) std::memcpy(scales.data() + i * 4, &odd, 4);
    src.add(kLayer + ".weight_scale", DType::kF32, {16, 2}, scales);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kPackQuantized, 4, 32, false, true));
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_EQ(exact_block_format(*w), std::nullopt);
  }
}

}  // namespace
}  // namespace kvasir::quant
