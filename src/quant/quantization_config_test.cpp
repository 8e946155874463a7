// parse_quantization_config: the configs llm-compressor and DeepSeek-V3 ship parse into the
// schemes they mean; every malformed or unsupported field is refused naming it.
#include "quant/quantization_config.h"

#include <gtest/gtest.h>

#include <random>

namespace kvasir::quant {
namespace {

Json json_of(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok()) << text;
  return j.ok() ? *j : Json();
}

StatusOr<QuantizationConfig> parse(const std::string& text) {
  return parse_quantization_config(json_of(text), "config.json: quantization_config");
}

// What llm-compressor 0.x writes for the FP8_DYNAMIC preset (per-channel weights, per-token
// dynamic activations).
const char* kFp8Dynamic = R"({
  "config_groups": {"group_0": {
    "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
                          "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token",
                          "symmetric": true, "type": "float"},
    "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
                "observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true, "type": "float"}}},
  "format": "float-quantized", "global_compression_ratio": null, "ignore": ["lm_head"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
  "sparsity_config": {}, "transform_config": {}, "version": "0.12.2"})";

std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

void expect_refused(const std::string& text, const std::string& needle, StatusCode code) {
  auto c = parse(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status().code(), code) << c.status().message();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(QuantizationConfig, CompressedTensorsFp8DynamicParses) {
  auto c = parse(kFp8Dynamic);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->method, "compressed-tensors");
  ASSERT_EQ(c->schemes.size(), 1u);
  const QuantScheme& s = c->schemes[0];
  EXPECT_EQ(s.format, "float-quantized");
  EXPECT_EQ(s.weights->strategy, ScaleStrategy::kChannel);
  EXPECT_EQ(s.weights->type, NumberType::kFloat);
  ASSERT_TRUE(s.input_activations.has_value());
  EXPECT_TRUE(s.input_activations->dynamic);
  EXPECT_EQ(s.input_activations->strategy, ScaleStrategy::kToken);
  EXPECT_FALSE(c->kv_cache.has_value());
  EXPECT_EQ(scheme_for_module(*c, "lm_head", true), nullptr);
  EXPECT_EQ(scheme_for_module(*c, "model.layers.0.mlp.down_proj", true), &s);
  EXPECT_EQ(scheme_for_module(*c, "model.embed_tokens", false), nullptr);
}

TEST(QuantizationConfig, CompressedTensorsKvCacheSchemeParses) {
  auto c = parse(with(kFp8Dynamic, R"("kv_cache_scheme": null)",
                      R"("kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true})"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->kv_cache.has_value());
  EXPECT_EQ(c->kv_cache->strategy, ScaleStrategy::kTensor);
  expect_refused(with(kFp8Dynamic, R"("kv_cache_scheme": null)",
                      R"("kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "attn_head"})"),
                 "attn_head", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("kv_cache_scheme": null)",
                      R"("kv_cache_scheme": {"num_bits": 8, "type": "int", "strategy": "tensor"})"),
                 "KV cache", StatusCode::kUnimplemented);
}

TEST(QuantizationConfig, Fp8BlockWiseAsDeepSeekV3Parses) {
  auto c = parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                     "weight_block_size": [128, 128]})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->method, "fp8");
  const QuantScheme& s = c->schemes.at(0);
  EXPECT_EQ(s.weights->strategy, ScaleStrategy::kBlock);
  EXPECT_EQ(s.weights->block_structure, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(s.input_activations->strategy, ScaleStrategy::kGroup);
  EXPECT_EQ(s.input_activations->group_size, 128);
}

TEST(QuantizationConfig, Fp8PerTensorStaticParsesWithIgnoredLayers) {
  auto c = parse(R"({"activation_scheme": "static", "quant_method": "fp8", "ignored_layers": ["lm_head"]})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const QuantScheme& s = c->schemes.at(0);
  EXPECT_EQ(s.weights->strategy, ScaleStrategy::kTensor);
  EXPECT_FALSE(s.input_activations->dynamic);
  EXPECT_EQ(scheme_for_module(*c, "lm_head", true), nullptr);
}

TEST(QuantizationConfig, UnsupportedMethodsAreRefusedNamingThem) {
  for (const char* m : {"mxfp4", "bitsandbytes", "modelopt", "hqq", "nvfp4"}) {
    expect_refused(std::string(R"({"quant_method": ")") + m + R"("})", std::string("'") + m + "'",
                   StatusCode::kUnimplemented);
  }
  expect_refused(R"({"bits": 4})", "quant_method", StatusCode::kInvalidArgument);
  expect_refused(R"([1])", "must be an object", StatusCode::kInvalidArgument);
}

TEST(QuantizationConfig, UnsupportedCompressedTensorsSchemesAreRefusedNamingThem) {
  expect_refused(with(kFp8Dynamic, R"("format": "float-quantized")", R"("format": "nvfp4-pack-quantized")"),
                 "nvfp4-pack-quantized", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("format": "float-quantized")", R"("format": "mxfp4-pack-quantized")"),
                 "mxfp4-pack-quantized", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("strategy": "channel")", R"("strategy": "tensor_group")"), "tensor_group",
                 StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true, "type": "float")",
                      R"("observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true, "type": "float", "num_bits": 4)"),
                 "4-bit float", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("sparsity_config": {})", R"("sparsity_config": {"format": "sparse-24-bitmask"})"),
                 "sparse-24-bitmask", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("transform_config": {})", R"("transform_config": {"config_groups": {}})"),
                 "transform_config", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("quantization_status": "compressed")", R"("quantization_status": "initialized")"),
                 "initialized", StatusCode::kUnimplemented);
  expect_refused(with(kFp8Dynamic, R"("output_activations": null)", R"("output_activations": {"num_bits": 8})"),
                 "output activation", StatusCode::kUnimplemented);
}

TEST(QuantizationConfig, MalformedFieldsAreRefusedNamingThem) {
  expect_refused(with(kFp8Dynamic, R"("strategy": "channel")", R"("strategy": "diagonal")"), "'diagonal'",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("strategy": "channel")", R"("strategy": 3)"), "'strategy' must be a string",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("strategy": "channel")", R"("strategy": "group")"), "group_size",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("strategy": "channel")", R"("strategy": "block")"), "block_structure",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("type": "float"},
    "output_activations")", R"("type": "bfloat"},
    "output_activations")"), "'bfloat'", StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("targets": ["Linear"])", R"("targets": [])"), "targets",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("targets": ["Linear"])", R"("targets": "Linear")"), "targets",
                 StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("ignore": ["lm_head"])", R"("ignore": ["re:(unclosed"])"),
                 "not a valid regular expression", StatusCode::kInvalidArgument);
  expect_refused(with(kFp8Dynamic, R"("format": "float-quantized", )", ""), "no storage format",
                 StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "compressed-tensors", "config_groups": {}})", "config_groups",
                 StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "fp8", "weight_block_size": [128]})", "weight_block_size",
                 StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "fp8", "weight_block_size": [128, 0]})", "weight_block_size",
                 StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})",
                 "needs activation_scheme 'dynamic'", StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "fp8", "activation_scheme": "sometimes"})", "activation_scheme",
                 StatusCode::kInvalidArgument);
  expect_refused(R"({"quant_method": "fp8", "fmt": "e5m2"})", "e5m2", StatusCode::kUnimplemented);
}

// Every value of a real config replaced, one at a time and then several at once, by values of
// other types and out-of-range ones: parsing never crashes, and each refusal says where.
void mutate(Json& j, std::mt19937& rng, const std::vector<Json>& pool, int depth) {
  if (j.is_object() && j.size() > 0) {
    auto& o = j.as_object();
    Json& v = o[rng() % o.size()].second;
    if (depth > 0 && (v.is_object() || v.is_array()) && rng() % 2) return mutate(v, rng, pool, depth - 1);
    v = pool[rng() % pool.size()];
  } else if (j.is_array() && j.size() > 0) {
    Json& v = j.as_array()[rng() % j.size()];
    if (depth > 0 && (v.is_object() || v.is_array()) && rng() % 2) return mutate(v, rng, pool, depth - 1);
    v = pool[rng() % pool.size()];
  }
}

TEST(QuantizationConfig, MutatedConfigsNeverCrashAndErrorsSayWhere) {
  const std::vector<Json> pool = {Json(), Json(true), Json(-1), Json(0), Json(3), Json(1e300), Json("tensor"),
                                  Json("re:("), Json("float"), Json("int"), Json("block"), Json("group"),
                                  Json(Json::Array{}), Json(Json::Array{Json(128), Json(0)}), Json(Json::Object{}),
                                  json_of(R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})")};
  std::mt19937 rng(15);
  const Json base = json_of(kFp8Dynamic);
  int ok = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    Json j = base;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) mutate(j, rng, pool, 4);
    auto c = parse_quantization_config(j, "quantization_config");
    if (c.ok()) {
      ++ok;
      for (const QuantScheme& s : c->schemes) ASSERT_TRUE(s.weights.has_value());
      (void)scheme_for_module(*c, "model.layers.0.mlp.down_proj", true);
    } else {
      ++refused;
      EXPECT_EQ(c.status().message().rfind("quantization_config", 0), 0u) << c.status().message();
    }
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(refused, 100);
}

TEST(QuantizationConfig, ModuleMatchingFollowsCompressedTensors) {
  EXPECT_TRUE(module_matches("lm_head", "lm_head"));
  EXPECT_FALSE(module_matches("lm_head", "model.lm_head_extra"));
  EXPECT_TRUE(module_matches("re:.*mlp.gate$", "model.layers.3.mlp.gate"));
  EXPECT_FALSE(module_matches("re:.*mlp.gate$", "model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(module_matches("re:model\\.layers\\.0\\.", "model.layers.0.self_attn.q_proj"));
}

TEST(QuantizationConfig, OnlineFp8IsPerChannelWithDynamicTokens) {
  auto c = online_quantization("fp8");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->schemes.at(0).weights->strategy, ScaleStrategy::kChannel);
  EXPECT_EQ((*c)->schemes.at(0).input_activations->strategy, ScaleStrategy::kToken);
  EXPECT_FALSE(online_quantization("").value().has_value());
  auto bad = online_quantization("awq");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'awq'"), std::string::npos);
}

// --quantization names a method as vLLM's flag does: the supported methods, vLLM's Marlin kernel
// names for their methods, none; anything else is refused listing what is known.
TEST(QuantizationConfig, QuantizationFlagNamesAMethod) {
  EXPECT_EQ(quantization_flag_method("").value(), "");
  EXPECT_EQ(quantization_flag_method("none").value(), "");
  EXPECT_EQ(quantization_flag_method("fp8").value(), "fp8");
  EXPECT_EQ(quantization_flag_method("gptq").value(), "gptq");
  EXPECT_EQ(quantization_flag_method("gptq_marlin").value(), "gptq");
  EXPECT_EQ(quantization_flag_method("awq_marlin").value(), "awq");
  EXPECT_EQ(quantization_flag_method("compressed-tensors").value(), "compressed-tensors");
  auto bad = quantization_flag_method("bitsandbytes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown method"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("gptq"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace kvasir::quant
