// parse_quantization_config on the integer weight-only methods: the GPTQ, AWQ and compressed-tensors
// pack-quantized configs the tools write parse into the schemes they mean; unsupported variants are
// refused naming the key.
#include <gtest/gtest.h>

#include "quant/quantization_config.h"

namespace kvasir::quant {
namespace {

StatusOr<QuantizationConfig> parse(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok()) << text;
  if (!j.ok()) return j.status();
  return parse_quantization_config(*j, "config.json: quantization_config");
}

std::string error_of(const std::string& text) {
  auto c = parse(text);
  return c.ok() ? "" : c.status().message();
}

// What llm-compressor writes for its W4A16 preset.
const char* kPackQuantizedW4A16 = R"({
  "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
  "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
    "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128,
                "dynamic": false, "actorder": null, "observer": "minmax", "block_structure": null}}},
  "ignore": ["lm_head", "re:.*layers\\.3\\..*"], "kv_cache_scheme": null, "sparsity_config": {}})";

TEST(IntWeightConfig, GptqParses) {
  auto c = parse(R"({"quant_method": "gptq", "bits": 8, "group_size": 64, "desc_act": true, "sym": true,
                     "damp_percent": 0.01, "true_sequential": true, "static_groups": false})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->method, "gptq");
  ASSERT_EQ(c->schemes.size(), 1u);
  const QuantScheme& s = c->schemes[0];
  EXPECT_EQ(s.format, "gptq");  // no checkpoint_format: v1, zeros stored minus one
  EXPECT_EQ(s.weights->num_bits, 8);
  EXPECT_EQ(s.weights->type, NumberType::kInt);
  EXPECT_EQ(s.weights->strategy, ScaleStrategy::kGroup);
  EXPECT_EQ(s.weights->group_size, 64);
  EXPECT_EQ(s.weights->actorder, "group");
  EXPECT_NE(scheme_for_module(*c, "model.layers.0.mlp.up_proj", true), nullptr);

  auto v2 = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "checkpoint_format": "gptq_v2", "sym": false})");
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->schemes[0].format, "gptq_v2");
  EXPECT_EQ(v2->schemes[0].weights->strategy, ScaleStrategy::kChannel);
  EXPECT_FALSE(v2->schemes[0].weights->symmetric);
  EXPECT_TRUE(v2->schemes[0].weights->actorder.empty());
}

TEST(IntWeightConfig, AwqParsesInBothKeySpellings) {
  for (const char* text : {R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm",
                               "modules_to_not_convert": ["visual"]})",
                           R"({"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": true, "version": "GEMM"})"}) {
    auto c = parse(text);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->schemes[0].format, "awq");
    EXPECT_EQ(c->schemes[0].weights->group_size, 128);
    EXPECT_FALSE(c->schemes[0].weights->symmetric);
  }
  auto c = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["visual"]})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(scheme_for_module(*c, "visual", true), nullptr);
}

TEST(IntWeightConfig, PackQuantizedParsesWithTargetsAndIgnores) {
  auto c = parse(kPackQuantizedW4A16);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->schemes.size(), 1u);
  EXPECT_EQ(c->schemes[0].format, "pack-quantized");
  EXPECT_EQ(c->schemes[0].weights->group_size, 128);
  EXPECT_NE(scheme_for_module(*c, "model.layers.0.self_attn.q_proj", true), nullptr);
  EXPECT_EQ(scheme_for_module(*c, "lm_head", true), nullptr);
  EXPECT_EQ(scheme_for_module(*c, "model.layers.3.mlp.up_proj", true), nullptr);
}

TEST(IntWeightConfig, RefusesUnsupportedVariantsNamingThem) {
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})").find("'bits' is 3; GPTQ weights of 4 or 8 bits"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "group_size": 128})").find("required key 'bits' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})").find("'group_size' is 0"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "desc_act": "yes"})").find("'desc_act' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})").find("checkpoint_format 'marlin'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "gptq", "bits": 4, "dynamic": {"-:.*": {}}})").find("'dynamic' GPTQ overrides"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})").find("AWQ version 'gemv'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 8, "group_size": 128})").find("AWQ weights of 8 bits"), std::string::npos);
  EXPECT_NE(error_of(R"({"quant_method": "awq", "bits": 4, "zero_point": false})").find("zero_point false"), std::string::npos);
  const std::string ct = R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": )";
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "tensor"}}}})")
                .find("per group or channel are supported, got 'tensor'"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 2, "type": "int", "strategy": "channel"}}}})")
                .find("pack-quantized weights of 2 bits"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "channel"}}}})")
                .find("holds integer weights, got float"),
            std::string::npos);
  EXPECT_NE(error_of(ct + R"({"targets": ["Linear"], "input_activations": {"num_bits": 8, "type": "int", "strategy": "token",
                              "dynamic": true}, "weights": {"num_bits": 4, "type": "int", "strategy": "channel"}}}})")
                .find("W4A8 / W8A8 int"),
            std::string::npos);
}

}  // namespace
}  // namespace kvasir::quant
