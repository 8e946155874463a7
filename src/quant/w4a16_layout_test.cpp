// The W4A16 device layout against the checkpoint's own dequantization (every format, group size,
// act-order, symmetric and with zero points), the mma B-fragment contract the kernels rely on, and
// the refusals for what the kernels do not take.
#include "quant/w4a16_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "quant/packed_int_tensors.h"
#include "quant/packed_int_test_util.h"

namespace kvasir::quant {
namespace {

using testing::IntLayer;
using testing::MemoryWeightSource;

const std::string kLayer = "model.layers.0.mlp.down_proj";

IntWeightScheme scheme(IntWeightLayout layout, int bits, int64_t group, bool desc_act, bool sym, int zero_offset) {
  IntWeightScheme s;
  s.layout = layout;
  s.bits = bits;
  s.group_size = group;
  s.desc_act = desc_act;
  s.sym = sym;
  s.zero_offset = zero_offset;
  return s;
}

struct Case {
  IntWeightLayout layout;
  int64_t group;  // -1: one group per row
  bool act_order;
  bool sym;
  int zero_offset;  // GPTQ v1: 1
};

std::string name(const Case& c) {
  return std::string(int_weight_layout_name(c.layout)) + " group " + std::to_string(c.group) +
         (c.act_order ? " act-order" : "") + (c.sym ? " sym" : " asym") + (c.zero_offset ? " v1" : "");
}

TEST(W4a16Layout, EveryValueIsTheCheckpointsDequantizationBitForBit) {
  const int64_t out = 48, in = 384;
  for (const Case& c : {Case{IntWeightLayout::kGptq, 128, false, true, 1}, Case{IntWeightLayout::kGptq, 128, false, false, 1},
                        Case{IntWeightLayout::kGptq, 32, true, false, 1}, Case{IntWeightLayout::kGptq, 64, true, true, 0},
                        Case{IntWeightLayout::kGptq, -1, false, false, 0}, Case{IntWeightLayout::kAwqGemm, 64, false, false, 0},
                        Case{IntWeightLayout::kAwqGemm, 128, false, false, 0},
                        Case{IntWeightLayout::kPackQuantized, 32, false, true, 0},
                        Case{IntWeightLayout::kPackQuantized, 128, true, false, 0},
                        Case{IntWeightLayout::kPackQuantized, -1, false, true, 0}}) {
    SCOPED_TRACE(name(c));
    const int64_t group = c.group == -1 ? in : c.group;
    const IntLayer l = testing::random_layer(4, out, in, group, c.act_order, 7, c.sym);
    MemoryWeightSource src;
    if (c.layout == IntWeightLayout::kGptq) testing::add_gptq(src, kLayer, l, c.zero_offset, c.act_order);
    if (c.layout == IntWeightLayout::kAwqGemm) testing::add_awq(src, kLayer, l);
    if (c.layout == IntWeightLayout::kPackQuantized) testing::add_pack_quantized(src, kLayer, l, c.sym, c.act_order);
    auto w = read_packed_int_weight(src, kLayer, scheme(c.layout, 4, c.group, c.act_order, c.sym, c.zero_offset));
    ASSERT_TRUE(w.ok()) << w.status().message();
    auto d = make_w4a16_weight(*w);
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(d->perm.empty(), !c.act_order);
    EXPECT_EQ(d->zeros.empty(), c.sym);
    ASSERT_EQ(d->codes.size(), static_cast<size_t>(out * in / 8));
    std::vector<float> want(static_cast<size_t>(out * in));
    dequantize_packed_int(*w, want.data());
    std::set<int32_t> columns;
    for (int64_t k = 0; k < in; ++k) {
      const int32_t col = d->perm.empty() ? static_cast<int32_t>(k) : d->perm[static_cast<size_t>(k)];
      columns.insert(col);
      // Permuted columns come in group order: k' / group_size is the column's group.
      ASSERT_EQ(packed_int_group(*w, col), k / group) << "column " << k;
      for (int64_t n = 0; n < out; ++n) {
        const float got = w4a16_value(*d, n, k), expect = want[static_cast<size_t>(n * in + col)];
        ASSERT_EQ(std::memcmp(&got, &expect, 4), 0) << "row " << n << " column " << col << ": " << got << " vs " << expect;
      }
    }
    EXPECT_EQ(columns.size(), static_cast<size_t>(in)) << "the permutation must be one";
  }
}

// The kernels' reading: lane l = 4 g + t of tile (nt, kc) loads one uint4; word 2 h + j, pair q
// ((word >> 4 q) & 0x000F000F) is the bf16x2 B-fragment register of row 16 nt + 8 h + g for k16 step
// 2 j + q / 2, register q % 2: rows (of B, i.e. columns k) 2t + 8 (q % 2) in the low half, + 1 in the
// high half (PTX mma.m16n8k16 B fragment: row = 2 * (lane % 4) + i % 2 + 8 * (i / 2), col = lane / 4).
TEST(W4a16Layout, TileWordsAreMmaBFragments) {
  const int64_t N = 32, K = 128;
  std::set<int64_t> seen;
  for (int64_t nt = 0; nt < N / 16; ++nt) {
    for (int64_t kc = 0; kc < K / 64; ++kc) {
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int h = 0; h < 2; ++h) {
          for (int j = 0; j < 2; ++j) {
            const int64_t word_index = ((nt * (K / 64) + kc) * 32 + lane) * 4 + h * 2 + j;
            for (int q = 0; q < 4; ++q) {
              for (int high = 0; high < 2; ++high) {
                const int64_t n = nt * 16 + h * 8 + g;
                const int64_t k = kc * 64 + (2 * j + q / 2) * 16 + 2 * t + 8 * (q % 2) + high;
                int64_t word;
                int nibble;
                w4a16_code_position(K, n, k, &word, &nibble);
                ASSERT_EQ(word, word_index);
                ASSERT_EQ(nibble * 4, q * 4 + high * 16) << "pair " << q << " half " << high;
                ASSERT_TRUE(seen.insert(word * 8 + nibble).second) << "two codes in one nibble";
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(N * K));
}

TEST(W4a16Layout, RefusesWhatTheKernelsDoNotTake) {
  struct Bad {
    int bits;
    int64_t out, in, group;
    const char* says;
  };
  for (const Bad& b : {Bad{8, 32, 128, 64, "8-bit"}, Bad{4, 24, 128, 64, "multiple of 16"},
                       Bad{4, 32, 96, 32, "in_features of 64"}, Bad{4, 32, 128, 16, "group size 16"}}) {
    SCOPED_TRACE(b.says);
    const IntLayer l = testing::random_layer(b.bits, b.out, b.in, b.group, false, 3);
    MemoryWeightSource src;
    testing::add_gptq(src, kLayer, l, 0);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, b.bits, b.group, false, false, 0));
    ASSERT_TRUE(w.ok()) << w.status().message();
    const Status st = w4a16_supported(*w);
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find(b.says), std::string::npos) << st.message();
    EXPECT_FALSE(make_w4a16_weight(*w).ok());
  }
  {  // act-order groups of unequal sizes: no contiguous reordering has whole groups
    IntLayer l = testing::random_layer(4, 32, 128, 32, false, 4);
    l.group_of.assign(128, 0);
    for (int64_t k = 0; k < 128; ++k) l.group_of[static_cast<size_t>(k)] = k < 40 ? 1 : (k < 64 ? 0 : static_cast<int32_t>(k / 32));
    MemoryWeightSource src;
    testing::add_gptq(src, kLayer, l, 0);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, 4, 32, true, false, 0));
    ASSERT_TRUE(w.ok()) << w.status().message();
    const Status st = w4a16_supported(*w);
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find("unequal"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace kvasir::quant
