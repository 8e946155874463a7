#include "quant/int_quant_scheme.h"

#include <gtest/gtest.h>

namespace kvasir::quant {
namespace {

Json parse(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok()) << text;
  return j.ok() ? *j : Json();
}

StatusOr<IntQuantConfig> parse_config(const std::string& text) { return parse_int_quant_config(parse(text)); }

std::string error_of(const std::string& text) {
  auto c = parse_config(text);
  return c.ok() ? "" : c.status().message();
}

const char* kPackQuantizedW4A16 = R"({
  "quant_method": "compressed-tensors", "format": "pack-quantized",
  "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
    "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128,
                "dynamic": false, "actorder": null, "observer": "minmax"}}},
  "ignore": ["lm_head", "re:.*layers\\.3\\..*"], "quantization_status": "compressed"})";

TEST(IntQuantScheme, ReadsGptq) {
  auto c = parse_config(R"({"quant_method": "gptq", "bits": 8, "group_size": 64, "desc_act": true, "sym": true})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto s = c->scheme_for("model.layers.0.mlp.up_proj");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->layout, IntWeightLayout::kGptq);
  EXPECT_EQ((*s)->bits, 8);
  EXPECT_EQ((*s)->group_size, 64);
  EXPECT_TRUE((*s)->desc_act);
  EXPECT_EQ((*s)->zero_offset, 1);  // no checkpoint_format: v1, zeros stored minus one
  auto v2 = parse_config(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "checkpoint_format": "gptq_v2"})");
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->groups[0].scheme.zero_offset, 0);
  EXPECT_EQ(v2->groups[0].scheme.group_size, -1);
}

TEST(IntQuantScheme, ReadsAwqInBothKeySpellings) {
  for (const char* text : {R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm"})",
                           R"({"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": true, "version": "GEMM"})"}) {
    auto c = parse_config(text);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->groups[0].scheme.layout, IntWeightLayout::kAwqGemm);
    EXPECT_EQ(c->groups[0].scheme.group_size, 128);
    EXPECT_FALSE(c->groups[0].scheme.sym);
  }
}

TEST(IntQuantScheme, ReadsPackQuantizedTargetsAndIgnores) {
  const Json qc = parse(kPackQuantizedW4A16);
  EXPECT_TRUE(is_int_weight_quantization(qc));
  auto c = parse_int_quant_config(qc);
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto s = c->scheme_for("model.layers.0.self_attn.q_proj");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->layout, IntWeightLayout::kPackQuantized);
  EXPECT_EQ((*s)->group_size, 128);
  EXPECT_TRUE((*s)->sym);
  EXPECT_FALSE(c->scheme_for("lm_head").ok());
  auto ignored = c->scheme_for("model.layers.3.mlp.up_proj");
  ASSERT_FALSE(ignored.ok());
  EXPECT_NE(ignored.status().message().find("ignores it ('re:.*layers\\.3\\..*')"), std::string::npos);
  // A regex target matches from the start of the name only.
  auto re = parse_config(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 8, "strategy": "channel", "symmetric": false}}}})");
  ASSERT_TRUE(re.ok()) << re.status().message();
  EXPECT_TRUE(re->scheme_for("model.layers.1.mlp.down_proj").ok());
  EXPECT_FALSE(re->scheme_for("model.layers.1.self_attn.o_proj").ok());
  EXPECT_EQ(re->groups[0].scheme.group_size, -1);
}

TEST(IntQuantScheme, OtherMethodsAreNotIntegerWeightOnly) {
  EXPECT_FALSE(is_int_weight_quantization(parse(R"({"quant_method": "fp8"})")));
  EXPECT_FALSE(is_int_weight_quantization(parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}})")));
  EXPECT_TRUE(is_int_weight_quantization(parse(R"({"quant_method": "compressed-tensors",
    "config_groups": {"g": {"format": "pack-quantized", "targets": ["Linear"], "weights": {"num_bits": 4}}}})")));
}

TEST(IntQuantScheme, RefusesUnsupportedVariantsNamingThem) {
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})").find("'bits' is 3; GPTQ weights of 4 or 8 bits"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "group_size": 128})").find("required key 'bits' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})").find("'group_size' is 0"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "desc_act": "yes"})").find("'desc_act' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})").find("checkpoint_format 'marlin'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})").find("AWQ version 'gemv'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 8, "group_size": 128})").find("AWQ weights of 8 bits"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 4, "zero_point": false})").find("zero_point false"), std::string::npos);
  const std::string ct = R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": )";
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "tensor"}}}})").find("strategy 'tensor'"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 2, "strategy": "channel"}}}})").find("'num_bits' is 2"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group"}}}})").find("'group_size' is missing"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "input_activations": {"num_bits": 8}, "weights": {"num_bits": 4, "strategy": "channel"}}}})")
                .find("W4A8 / W8A8 int"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["re:(unclosed"], "weights": {"num_bits": 4, "strategy": "channel"}}}})").find("not a valid regular expression"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": [], "weights": {"num_bits": 4, "strategy": "channel"}}}})").find("'targets' must list"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "channel", "actorder": "sideways"}}}})")
                .find("actorder 'sideways'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvasir::quant
