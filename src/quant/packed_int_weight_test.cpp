#include <gtest/gtest.h>

#include "quant/dequantize.h"
#include "quant/int_quantized_weight_source.h"
#include "quant/packed_int_tensors.h"
#include "quant/packed_int_test_util.h"

namespace kvasir::quant {
namespace {

using testing::IntLayer;
using testing::MemoryWeightSource;

const std::string kLayer = "model.layers.0.mlp.down_proj";

QuantizationConfig config_of(const std::string& method, const std::string& format, std::vector<std::string> targets,
                             int bits, int64_t group, bool sym) {
  QuantizationConfig c;
  c.method = method;
  QuantScheme s;
  s.targets = std::move(targets);
  s.format = format;
  s.weights = QuantArgs{};
  s.weights->type = NumberType::kInt;
  s.weights->num_bits = bits;
  s.weights->symmetric = sym;
  s.weights->strategy = group > 0 ? ScaleStrategy::kGroup : ScaleStrategy::kChannel;
  s.weights->group_size = group > 0 ? group : 0;
  c.schemes.push_back(s);
  return c;
}

IntWeightScheme scheme(IntWeightLayout layout, int bits, int64_t group, bool desc_act, bool sym, int zero_offset = 0) {
  IntWeightScheme s;
  s.layout = layout;
  s.bits = bits;
  s.group_size = group;
  s.desc_act = desc_act;
  s.sym = sym;
  s.zero_offset = zero_offset;
  return s;
}

void expect_dequantizes_to(const PackedIntWeight& w, const IntLayer& l) {
  ASSERT_EQ(w.out_features, l.out);
  ASSERT_EQ(w.in_features, l.in);
  std::vector<float> got(static_cast<size_t>(l.out * l.in));
  dequantize_packed_int(w, got.data());
  for (int64_t o = 0; o < l.out; ++o) {
    for (int64_t k = 0; k < l.in; ++k) {
      ASSERT_EQ(got[static_cast<size_t>(o * l.in + k)], l.expected(o, k)) << "row " << o << " column " << k;
    }
  }
}

std::string error_of(const MemoryWeightSource& src, const IntWeightScheme& s) {
  auto w = read_packed_int_weight(src, kLayer, s);
  return w.ok() ? "" : w.status().message();
}

struct GptqCase {
  int bits;
  int64_t group;  // -1: one group per row
  bool desc_act;
  int zero_offset;
};

class GptqDequantize : public ::testing::TestWithParam<GptqCase> {};

TEST_P(GptqDequantize, MatchesTheUnpackedIntegersTimesScales) {
  const GptqCase c = GetParam();
  const int64_t in = 256, out = 24;
  IntLayer l = testing::random_layer(c.bits, out, in, c.group == -1 ? in : c.group, c.desc_act, 7);
  for (auto& z : l.zero) z += c.zero_offset;  // v1 zeros run 1 .. 2^bits: stored as zero - 1
  MemoryWeightSource src;
  testing::add_gptq(src, kLayer, l, c.zero_offset);
  auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, c.bits, c.group, c.desc_act, false, c.zero_offset));
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->g_idx != nullptr, c.desc_act);  // a trivial g_idx is dropped: kernels need not read it
  expect_dequantizes_to(*w, l);
}

INSTANTIATE_TEST_SUITE_P(BitsGroupsActOrder, GptqDequantize,
                         ::testing::Values(GptqCase{4, 32, false, 1}, GptqCase{4, 64, true, 1}, GptqCase{4, 128, false, 0},
                                           GptqCase{4, -1, false, 1}, GptqCase{8, 32, true, 1}, GptqCase{8, 128, false, 1},
                                           GptqCase{8, -1, true, 0}));

TEST(GptqV1, AStoredZeroOfFifteenMeansSixteen) {
  // v1 writers store zero - 1 in 4 bits; readers add 1 back after masking (0xF -> 16).
  IntLayer l = testing::random_layer(4, 8, 32, 32, false, 3);
  for (auto& z : l.zero) z = 0;  // stored as -1 & 0xF = 15
  MemoryWeightSource src;
  testing::add_gptq(src, kLayer, l, 1);
  for (auto& z : l.zero) z = 16;
  auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kGptq, 4, 32, false, false, 1));
  ASSERT_TRUE(w.ok()) << w.status().message();
  expect_dequantizes_to(*w, l);
}

TEST(AwqDequantize, ReadsTheInterleavedNibbleOrder) {
  // One word 0x76543210: nibble i holds column order[i] (order 0 2 4 6 1 3 5 7).
  MemoryWeightSource src;
  src.add_i32(kLayer + ".qweight", {1, 1}, {0x76543210});
  src.add_i32(kLayer + ".qzeros", {1, 1}, {0});
  src.add_f16(kLayer + ".scales", {1, 8}, std::vector<float>(8, 1.0f));
  auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kAwqGemm, 4, -1, false, false));
  ASSERT_TRUE(w.ok()) << w.status().message();
  const uint32_t column_values[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int o = 0; o < 8; ++o) EXPECT_EQ(packed_int_value(*w, o, 0), column_values[o]) << "column " << o;
}

TEST(AwqDequantize, MatchesTheUnpackedIntegersTimesScales) {
  for (int64_t group : {32, 64, 128}) {
    const IntLayer l = testing::random_layer(4, 32, 256, group, false, 11);
    MemoryWeightSource src;
    testing::add_awq(src, kLayer, l);
    auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kAwqGemm, 4, group, false, false));
    ASSERT_TRUE(w.ok()) << w.status().message();
    expect_dequantizes_to(*w, l);
  }
}

TEST(PackQuantizedDequantize, SymmetricAndAsymmetricGroupAndChannel) {
  for (int bits : {4, 8}) {
    for (int64_t group : {int64_t{32}, int64_t{128}, int64_t{-1}}) {
      for (bool sym : {true, false}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(group) + (sym ? " sym" : " asym"));
        // 20 rows: zero points pack along the rows into a partial last word.
        const int64_t in = 256;
        const IntLayer l = testing::random_layer(bits, 20, in, group == -1 ? in : group, false, 5, sym);
        MemoryWeightSource src;
        testing::add_pack_quantized(src, kLayer, l, sym);
        auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kPackQuantized, bits, group, false, sym));
        ASSERT_TRUE(w.ok()) << w.status().message();
        expect_dequantizes_to(*w, l);
      }
    }
  }
}

TEST(PackQuantizedDequantize, ActOrderGroupsFromWeightGIdx) {
  const IntLayer l = testing::random_layer(4, 16, 128, 32, true, 9);
  MemoryWeightSource src;
  testing::add_pack_quantized(src, kLayer, l, false, true);
  auto w = read_packed_int_weight(src, kLayer, scheme(IntWeightLayout::kPackQuantized, 4, 32, true, false));
  ASSERT_TRUE(w.ok()) << w.status().message();
  expect_dequantizes_to(*w, l);
}

// ---- every field checked, the error naming the tensor ----

MemoryWeightSource gptq_source(const IntLayer& l) {
  MemoryWeightSource src;
  testing::add_gptq(src, kLayer, l, 1);
  return src;
}

TEST(GptqChecks, RefusesInconsistentTensors) {
  const IntLayer l = testing::random_layer(4, 16, 128, 32, true, 1);
  const IntWeightScheme s = scheme(IntWeightLayout::kGptq, 4, 32, true, false, 1);
  {
    MemoryWeightSource src = gptq_source(l);
    src.add_f16(kLayer + ".scales", {3, 16}, std::vector<float>(48, 1.0f));
    EXPECT_NE(error_of(src, s).find(kLayer + ".scales has shape [3, 16], expected [4, 16]"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    src.add_i32(kLayer + ".qzeros", {4, 3}, std::vector<int32_t>(12, 0));
    EXPECT_NE(error_of(src, s).find(kLayer + ".qzeros has shape"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    src.add_f16(kLayer + ".qweight", {16, 16}, std::vector<float>(256, 1.0f));
    EXPECT_NE(error_of(src, s).find(kLayer + ".qweight has type f16, expected i32"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    std::vector<int32_t> g = l.group_of;
    g[5] = 4;
    src.add_i32(kLayer + ".g_idx", {128}, g);
    EXPECT_NE(error_of(src, s).find(kLayer + ".g_idx: column 5 is in group 4, outside [0, 4)"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    src.add_i32(kLayer + ".g_idx", {64}, std::vector<int32_t>(64, 0));
    EXPECT_NE(error_of(src, s).find(kLayer + ".g_idx has shape [64], expected [128]"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    src.remove(kLayer + ".g_idx");
    EXPECT_NE(error_of(src, s).find(kLayer + ".g_idx is missing"), std::string::npos) << error_of(src, s);
  }
  {
    MemoryWeightSource src = gptq_source(l);
    src.remove(kLayer + ".qzeros");
    EXPECT_NE(error_of(src, s).find(kLayer + ".qzeros is missing"), std::string::npos) << error_of(src, s);
  }
  {
    // The group size in the config disagrees with the scale count.
    MemoryWeightSource src = gptq_source(l);
    EXPECT_NE(error_of(src, scheme(IntWeightLayout::kGptq, 4, 64, true, false, 1)).find(kLayer + ".scales has shape [4, 16], expected [2, 16]"),
              std::string::npos);
  }
}

TEST(GptqChecks, RefusesAShuffledGIdxWithoutActOrder) {
  const IntLayer l = testing::random_layer(4, 16, 128, 32, true, 2);
  MemoryWeightSource src = gptq_source(l);
  EXPECT_NE(error_of(src, scheme(IntWeightLayout::kGptq, 4, 32, false, false, 1)).find("but act-order is off"), std::string::npos);
}

TEST(GptqChecks, RefusesSymmetricSchemeWithOtherZeros) {
  IntLayer l = testing::random_layer(4, 16, 64, 32, false, 4, true);
  MemoryWeightSource ok_src = gptq_source(l);
  EXPECT_EQ(error_of(ok_src, scheme(IntWeightLayout::kGptq, 4, 32, false, true, 1)), "");
  l.zero[3] = 5;
  MemoryWeightSource src = gptq_source(l);
  EXPECT_NE(error_of(src, scheme(IntWeightLayout::kGptq, 4, 32, false, true, 1)).find(kLayer + ".qzeros: the scheme is symmetric but row 1"),
            std::string::npos)
      << error_of(src, scheme(IntWeightLayout::kGptq, 4, 32, false, true, 1));
}

TEST(AwqChecks, RefusesBadShapes) {
  const IntLayer l = testing::random_layer(4, 16, 64, 32, false, 6);
  MemoryWeightSource src;
  testing::add_awq(src, kLayer, l);
  src.add_f16(kLayer + ".scales", {2, 8}, std::vector<float>(16, 1.0f));
  EXPECT_NE(error_of(src, scheme(IntWeightLayout::kAwqGemm, 4, 32, false, false)).find(kLayer + ".scales has shape [2, 8], expected [2, 16]"),
            std::string::npos);
}

TEST(GroupChecks, OnlyGptqAllowsARaggedLastGroup) {
  // 96 columns in groups of 64: GPTQ writes two groups, the second of 32 columns.
  const IntLayer l = testing::random_layer(4, 16, 96, 64, false, 13);
  MemoryWeightSource gptq;
  testing::add_gptq(gptq, kLayer, l, 0);
  EXPECT_EQ(error_of(gptq, scheme(IntWeightLayout::kGptq, 4, 64, false, false)), "");
  MemoryWeightSource awq;
  testing::add_awq(awq, kLayer, l);
  EXPECT_NE(error_of(awq, scheme(IntWeightLayout::kAwqGemm, 4, 64, false, false))
                .find(kLayer + ".qweight: 96 input columns are not whole groups of 64 (group_size), which awq requires"),
            std::string::npos);
  MemoryWeightSource ct;
  testing::add_pack_quantized(ct, kLayer, l, false);
  EXPECT_NE(error_of(ct, scheme(IntWeightLayout::kPackQuantized, 4, 64, false, false)).find("which pack-quantized requires"),
            std::string::npos);
}

TEST(PackQuantizedChecks, RefusesInconsistentTensors) {
  const IntLayer l = testing::random_layer(4, 16, 128, 32, false, 8);
  const IntWeightScheme asym = scheme(IntWeightLayout::kPackQuantized, 4, 32, false, false);
  {
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, false);
    std::vector<uint8_t> shape(16);
    const int64_t dims[2] = {16, 120};
    std::memcpy(shape.data(), dims, 16);
    src.add(kLayer + ".weight_shape", DType::kI64, {2}, shape);
    EXPECT_NE(error_of(src, asym).find(kLayer + ".weight_packed has shape [16, 16], expected [16, 15]"), std::string::npos) << error_of(src, asym);
  }
  {
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, false);
    src.remove(kLayer + ".weight_zero_point");
    EXPECT_NE(error_of(src, asym).find(kLayer + ".weight_zero_point is missing"), std::string::npos) << error_of(src, asym);
  }
  {
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, false);
    EXPECT_NE(error_of(src, scheme(IntWeightLayout::kPackQuantized, 4, 32, false, true)).find("the scheme is symmetric, so no zero points"),
              std::string::npos);
  }
  {
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, false);
    src.add_f16(kLayer + ".weight_scale", {16, 1}, std::vector<float>(16, 1.0f));
    EXPECT_NE(error_of(src, asym).find(kLayer + ".weight_scale has shape [16, 1], expected [16, 4]"), std::string::npos) << error_of(src, asym);
  }
  {
    MemoryWeightSource src;
    testing::add_pack_quantized(src, kLayer, l, false);
    src.add_i32(kLayer + ".weight_shape", {2}, {16, 0});
    EXPECT_NE(error_of(src, asym).find(kLayer + ".weight_shape: dimension 1 is 0"), std::string::npos) << error_of(src, asym);
  }
}

// ---- the WeightSource the model binds ----

TEST(IntQuantizedWeightSource, ShowsPackedLayersAsDenseWeightsAndPassesTheRestThrough) {
  IntLayer l = testing::random_layer(4, 16, 64, 32, false, 12);
  for (auto& z : l.zero) z += 1;
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_gptq(*base, kLayer, l, 1);
  base->add_f16("model.norm.weight", {4}, {1, 2, 3, 4});
  auto src = IntQuantizedWeightSource::wrap(std::move(base), config_of("gptq", "gptq", {"Linear"}, 4, 32, false));
  ASSERT_TRUE(src.ok()) << src.status().message();
  const std::vector<std::string> want = {kLayer + ".weight", "model.norm.weight"};
  EXPECT_EQ((*src)->tensor_names(), want);
  EXPECT_FALSE((*src)->has_tensor(kLayer + ".qweight"));
  auto w = (*src)->tensor(kLayer + ".weight");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->dtype, DType::kQ8_0);  // 4-bit asymmetric, groups of whole blocks: exact as Q8_0
  EXPECT_EQ(w->shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(w->nbytes, 16u * 2 * sizeof(BlockQ8_0));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 64, 0u);
  std::vector<float> row(64);
  for (int64_t o = 0; o < 16; ++o) {
    dequantize_row(DType::kQ8_0, w->data + o * 2 * sizeof(BlockQ8_0), row.data(), 64);
    for (int64_t k = 0; k < 64; ++k) ASSERT_EQ(row[static_cast<size_t>(k)], l.expected(o, k));
  }
  auto norm = (*src)->tensor("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype, DType::kF16);
  const auto* packed = packed_int_weight(**src, kLayer + ".weight");
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->bits, 4);
  EXPECT_EQ(packed->num_groups, 2);
  // The dense weight carries its packed form (what a backend with int4 kernels keeps); others none.
  EXPECT_EQ(w->packed_int, packed);
  EXPECT_EQ(norm->packed_int, nullptr);
}

// --load-format dummy on a GPU: linears without values the config targets carry their scheme
// (a PackedIntWeight without tensors), listed once; host values are refused (no packed dummies
// on the CPU); a config that targets nothing is refused.
TEST(IntQuantizedWeightSource, DummyLinearsCarryTheirSchemeWithoutValues) {
  auto base = std::make_unique<MemoryWeightSource>();
  base->add(kLayer + ".weight", DType::kBF16, {32, 256}, {});
  base->add("model.embed_tokens.weight", DType::kBF16, {100, 256}, {});
  base->add("lm_head.weight", DType::kBF16, {100, 256}, {});
  base->add_f16("model.norm.weight", {4}, {1, 2, 3, 4});
  auto src = IntQuantizedWeightSource::wrap_dummy(std::move(base), config_of("gptq", "gptq", {"Linear"}, 4, 128, true));
  ASSERT_TRUE(src.ok()) << src.status().message();
  const std::vector<std::string> want = {"lm_head.weight", "model.embed_tokens.weight", kLayer + ".weight",
                                         "model.norm.weight"};
  EXPECT_EQ((*src)->tensor_names(), want);
  auto w = (*src)->tensor(kLayer + ".weight");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->data, nullptr);
  ASSERT_NE(w->packed_int, nullptr);
  EXPECT_EQ(w->packed_int->qweight, nullptr);
  EXPECT_EQ(w->packed_int->bits, 4);
  EXPECT_EQ(w->packed_int->group_size, 128);
  EXPECT_EQ(w->packed_int->num_groups, 2);
  EXPECT_EQ(w->packed_int->out_features, 32);
  for (const char* dense : {"model.embed_tokens.weight", "lm_head.weight"}) {  // as real checkpoints keep them
    auto e = (*src)->tensor(dense);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->packed_int, nullptr) << dense;
  }

  auto host = std::make_unique<MemoryWeightSource>();
  host->add_f16(kLayer + ".weight", {2, 4}, std::vector<float>(8, 0.5f));
  auto refused = IntQuantizedWeightSource::wrap_dummy(std::move(host), config_of("gptq", "gptq", {"Linear"}, 4, 128, true));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("GPU backend"), std::string::npos) << refused.status().message();

  auto none = std::make_unique<MemoryWeightSource>();
  none->add_f16("model.norm.weight", {4}, {1, 2, 3, 4});
  EXPECT_FALSE(IntQuantizedWeightSource::wrap_dummy(std::move(none), config_of("gptq", "gptq", {"Linear"}, 4, 128, true)).ok());
}

TEST(IntQuantizedWeightSource, ActOrderLayersAreFloat32) {
  IntLayer l = testing::random_layer(4, 16, 64, 32, true, 14);
  for (auto& z : l.zero) z += 1;
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_gptq(*base, kLayer, l, 1);
  QuantizationConfig config = config_of("gptq", "gptq", {"Linear"}, 4, 32, false);
  config.schemes[0].weights->actorder = "group";
  auto src = IntQuantizedWeightSource::wrap(std::move(base), config);
  ASSERT_TRUE(src.ok()) << src.status().message();
  auto w = (*src)->tensor(kLayer + ".weight");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->dtype, DType::kF32);
  const auto* f = reinterpret_cast<const float*>(w->data);
  for (int64_t o = 0; o < 16; ++o) {
    for (int64_t k = 0; k < 64; ++k) ASSERT_EQ(f[o * 64 + k], l.expected(o, k));
  }
}

TEST(IntQuantizedWeightSource, RefusesALayerTheConfigIgnoresOrNoLayerAtAll) {
  const QuantizationConfig config = config_of("compressed-tensors", "pack-quantized", {"re:.*self_attn.*"}, 4, 32, true);
  {
    auto base = std::make_unique<MemoryWeightSource>();
    testing::add_pack_quantized(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1, true), true);
    auto src = IntQuantizedWeightSource::wrap(std::move(base), config);
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("layer " + kLayer + " holds packed compressed-tensors tensors, but the quantization_config ignores or does not target it"),
              std::string::npos)
        << src.status().message();
  }
  {
    auto base = std::make_unique<MemoryWeightSource>();
    base->add_f16(kLayer + ".weight", {1}, {1});
    auto src = IntQuantizedWeightSource::wrap(std::move(base), config);
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("no tensor is packed"), std::string::npos) << src.status().message();
  }
  {
    auto base = std::make_unique<MemoryWeightSource>();
    testing::add_gptq(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1), 1);
    base->add_f16(kLayer + ".weight", {1}, {1});
    auto src = IntQuantizedWeightSource::wrap(std::move(base), config_of("gptq", "gptq", {"Linear"}, 4, 32, false));
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("holds both a dense weight and gptq packed tensors"), std::string::npos);
  }
}

TEST(IntQuantizedWeightSource, RefusesADenseLinearThatCompressedTensorsSaysItPacked) {
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_pack_quantized(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1, true), true);
  base->add_f16("model.layers.0.mlp.up_proj.weight", {2, 2}, {1, 2, 3, 4});
  base->add_f16("model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4});  // not a linear: stays dense
  auto src = IntQuantizedWeightSource::wrap(std::move(base),
                                            config_of("compressed-tensors", "pack-quantized", {"Linear"}, 4, 32, true));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("weight model.layers.0.mlp.up_proj.weight is stored dense, but the "
                                        "quantization_config packs"),
            std::string::npos)
      << src.status().message();
}

TEST(IntQuantizedWeightSource, RefusesAPackedLayerWithoutItsPackedWeights) {
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_gptq(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1), 0);
  testing::add_gptq(*base, "model.layers.0.mlp.up_proj", testing::random_layer(4, 16, 64, 32, false, 2), 0);
  base->remove("model.layers.0.mlp.up_proj.qweight");
  auto src = IntQuantizedWeightSource::wrap(std::move(base), config_of("gptq", "gptq_v2", {"Linear"}, 4, 32, false));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("tensor model.layers.0.mlp.up_proj.g_idx belongs to no packed layer"), std::string::npos)
      << src.status().message();
}

TEST(IntQuantizedWeightSource, RefusesAConfigMixingIntegerAndFloatFormats) {
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_pack_quantized(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1, true), true);
  QuantizationConfig config = config_of("compressed-tensors", "pack-quantized", {"re:.*mlp.*"}, 4, 32, true);
  QuantScheme fp8 = config.schemes[0];
  fp8.format = "float-quantized";
  fp8.targets = {"re:.*self_attn.*"};
  config.schemes.push_back(fp8);
  auto src = IntQuantizedWeightSource::wrap(std::move(base), config);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("mixes format 'float-quantized' with integer weight-only formats"), std::string::npos);
}

TEST(IntQuantizedWeightSource, PackedTensorsOfTheWrongFormatAreRefused) {
  // An AWQ config over a checkpoint whose layer is pack-quantized: the layer's marker names the format.
  auto base = std::make_unique<MemoryWeightSource>();
  testing::add_pack_quantized(*base, kLayer, testing::random_layer(4, 16, 64, 32, false, 1, true), true);
  auto src = IntQuantizedWeightSource::wrap(std::move(base), config_of("awq", "awq", {"Linear"}, 4, 32, false));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find(kLayer + ".weight_packed is not part of format 'awq'"), std::string::npos)
      << src.status().message();
}

}  // namespace
}  // namespace kvasir::quant
