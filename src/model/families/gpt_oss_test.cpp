// The gpt_oss family's config: transformers' GptOssConfig defaults for what a config.json leaves
// out, the YaRN fields it reads, the expert counts and SwiGLU constants it checks, and the MXFP4
// checkpoints it refuses (HF quantization_config, GGUF tensor type) with a message naming MXFP4.
// Its numerics are checked against transformers by tiny_model_golden_test.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "loader/gguf_file.h"
#include "loader/test_writers.h"
#include "model/registry.h"
#include "model/tiny_config_test_util.h"

namespace kvasir {
namespace {

using test_util::parse_json_or_fail;
using test_util::tiny_config;

TEST(GptOssConfig, ConfigJsonDefaultsAreGptOssConfigs) {
  Json j = tiny_config("gpt_oss");
  std::erase_if(j.as_object(), [](const auto& kv) { return kv.first == "sliding_window"; });
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "gpt_oss");
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_EQ(c->layer_is_sliding, (std::vector<bool>{true, false}));  // even layers slide
  EXPECT_TRUE(c->attention_bias);
  EXPECT_DOUBLE_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c->family_params.at("num_experts"), 128);
  EXPECT_DOUBLE_EQ(c->family_params.at("num_experts_per_tok"), 4);
  EXPECT_DOUBLE_EQ(c->family_params.at("swiglu_alpha"), 1.702);
  EXPECT_DOUBLE_EQ(c->family_params.at("swiglu_limit"), 7.0);
}

TEST(GptOssConfig, ReadsTheReleasedConfigsKeys) {
  Json j = tiny_config("gpt_oss");
  const Json rest = parse_json_or_fail(R"({
      "num_local_experts": 32, "num_experts_per_tok": 4, "swiglu_limit": 3.5,
      "layer_types": ["full_attention", "sliding_attention"], "sliding_window": 16,
      "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0,
                       "truncate": false, "original_max_position_embeddings": 1024},
      "rope_theta": 50000})");
  for (const auto& [k, v] : rest.as_object()) j.set(k, v);
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->layer_is_sliding, (std::vector<bool>{false, true}));
  EXPECT_EQ(c->sliding_window, 16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 50000.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 2.0);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c->family_params.at("num_experts"), 32);
  EXPECT_DOUBLE_EQ(c->family_params.at("swiglu_limit"), 3.5);
}

TEST(GptOssConfig, BadExpertNumbersAreRefusedNamingThem) {
  for (const char* extra : {R"({"num_local_experts": 4, "num_experts_per_tok": 5})",
                            R"({"num_local_experts": 0})", R"({"swiglu_limit": -1})",
                            R"({"num_experts_per_tok": "four"})"}) {
    Json j = tiny_config("gpt_oss");
    const Json fields = parse_json_or_fail(extra);
    for (const auto& [k, v] : fields.as_object()) j.set(k, v);
    auto c = model_config_from_hf_json(j, nullptr);
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << extra;
    EXPECT_NE(c.status().message().find("config.json"), std::string::npos) << c.status().message();
  }
}

TEST(GptOssConfig, Mxfp4CheckpointIsRefusedNamingIt) {
  Json j = tiny_config("gpt_oss");
  j.set("quantization_config", parse_json_or_fail(R"({"quant_method": "mxfp4", "modules_to_not_convert": []})"));
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("MXFP4"), std::string::npos) << c.status().message();

  // llama.cpp writes the experts as ggml type 39: refused when the file is read, naming it.
  testing::GgufWriter w;
  w.add_string("general.architecture", "gpt-oss");
  w.add_tensor("blk.0.ffn_gate_exps.weight", static_cast<DType>(39), {32, 1}, testing::Bytes(17, 0));
  const testing::Bytes b = w.build();
  auto f = GgufFile::parse(std::span<const uint8_t>(b.data(), b.size()));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("ffn_gate_exps.weight' has unsupported ggml type 39 (MXFP4)"),
            std::string::npos)
      << f.status().message();
}

}  // namespace
}  // namespace kvasir
