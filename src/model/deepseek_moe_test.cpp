// DeepSeek's MoE layers at config and load time: which layers are MoE (first_k_dense_replace,
// moe_layer_freq, n_routed_experts null), the router each model_type has in transformers (V2 never
// renormalizes; V3's sigmoid, correction bias and top-2-sum groups), llama.cpp's GGUF keys read
// to the same routing, routers that cannot run refused naming the key, and a V3 checkpoint
// without its correction bias refused by name. The logits are golden-tested against transformers
// in tiny_model_golden_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "common/mapped_file.h"
#include "loader/dummy_weights.h"
#include "loader/test_writers.h"
#include "model/decoder_model.h"
#include "model/families/deepseek_moe.h"
#include "model/registry.h"
#include "model/tiny_config_test_util.h"

namespace kvasir {
namespace {

using test_util::tiny_config;

StatusOr<ModelConfig> from_hf(const Json& j) { return model_config_from_hf_json(j, nullptr); }

std::vector<bool> moe_layers(const ModelConfig& c) {
  std::vector<bool> out;
  for (int l = 0; l < c.num_layers; ++l) out.push_back(is_deepseek_moe_layer(c, l));
  return out;
}

void expect_error(const StatusOr<ModelConfig>& c, StatusCode code, const std::string& text) {
  ASSERT_FALSE(c.ok()) << "expected an error containing: " << text;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(text), std::string::npos) << c.status().message();
}

TEST(DeepseekMoe, LayersFollowFirstKDenseReplaceAndMoeLayerFreq) {
  Json j = tiny_config("deepseek_v2");
  j.set("num_hidden_layers", Json(int64_t{5}));
  auto c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(moe_layers(*c), (std::vector<bool>{false, true, true, true, true}));
  // DeepSeek's own code: MoE where layer >= first_k_dense_replace and layer % moe_layer_freq == 0.
  j.set("moe_layer_freq", Json(int64_t{2}));
  c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(moe_layers(*c), (std::vector<bool>{false, false, true, false, true}));
  const WeightManifest m = (*family_of(*c))->manifest(*c);
  EXPECT_EQ(m.find(m.layers[1], "ffn_gate_inp.weight"), nullptr);
  EXPECT_NE(m.find(m.layers[1], "ffn_up.weight"), nullptr);
  EXPECT_NE(m.find(m.layers[2], "ffn_up_shexp.weight"), nullptr);
  EXPECT_EQ(m.find(m.layers[2], "ffn_up.weight"), nullptr);
  // Every layer dense: first_k_dense_replace covers them all, or there are no routed experts.
  j.set("first_k_dense_replace", Json(int64_t{5}));
  c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(moe_layers(*c), std::vector<bool>(5, false));
  EXPECT_EQ(c->family_params.count("num_experts"), 0u);
  j = tiny_config("deepseek_v3");
  j.set("n_routed_experts", Json());
  c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(moe_layers(*c), std::vector<bool>(2, false));
}

TEST(DeepseekMoe, EachModelTypeGetsTransformersRouter) {
  Json j = tiny_config("deepseek_v2");  // topk_method greedy by default
  j.set("n_group", Json(int64_t{2}));
  j.set("topk_group", Json(int64_t{1}));
  j.set("norm_topk_prob", Json(true));  // DeepseekV2TopkRouter ignores it
  j.set("routed_scaling_factor", Json(16.0));
  j.set("n_shared_experts", Json(int64_t{2}));
  auto c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  MoeLayerConfig m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_EQ(m.routing.top_k, 2);
  EXPECT_EQ(m.routing.scoring, MoeScoring::kSoftmax);
  EXPECT_EQ(m.routing.num_groups, 1);  // greedy: the groups are not used
  EXPECT_FALSE(m.routing.renormalize);
  EXPECT_FLOAT_EQ(m.routing.routed_scaling_factor, 16.0f);
  EXPECT_FALSE(m.correction_bias);
  EXPECT_EQ(m.shared_intermediate_size, 2 * 32);  // moe_intermediate_size x n_shared_experts
  EXPECT_FALSE(m.shared_expert_gate);

  j.set("topk_method", Json("group_limited_greedy"));
  c = from_hf(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.routing.num_groups, 2);
  EXPECT_EQ(m.routing.topk_groups, 1);
  EXPECT_EQ(m.routing.group_score, MoeGroupScore::kMax);

  c = from_hf(tiny_config("deepseek_v3"));  // norm_topk_prob and routed_scaling_factor defaulted
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.routing.scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(m.correction_bias);
  EXPECT_EQ(m.routing.num_groups, 2);
  EXPECT_EQ(m.routing.topk_groups, 1);
  EXPECT_EQ(m.routing.group_score, MoeGroupScore::kTop2Sum);
  EXPECT_TRUE(m.routing.renormalize);
  EXPECT_FLOAT_EQ(m.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(m.shared_intermediate_size, 32);
}

TEST(DeepseekMoe, RoutersThatCannotRunAreRefusedNamingTheKey) {
  Json j = tiny_config("deepseek_v2");
  j.set("topk_method", Json("noaux_tc"));
  expect_error(from_hf(j), StatusCode::kUnimplemented, "topk_method 'noaux_tc'");
  j = tiny_config("deepseek_v2");
  j.set("topk_method", Json("group_limited_greedy"));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "'n_group' is missing");
  j = tiny_config("deepseek_v2");
  j.set("scoring_func", Json("sigmoid"));
  expect_error(from_hf(j), StatusCode::kUnimplemented, "scoring_func 'sigmoid'");
  j = tiny_config("deepseek_v2");
  j.set("num_experts_per_tok", Json());  // DeepseekV2Config has no default
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "'num_experts_per_tok' is missing");
  j = tiny_config("deepseek_v2");
  j.set("n_shared_experts", Json(int64_t{-1}));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "'n_shared_experts' is -1");
  j = tiny_config("deepseek_v2");
  j.set("routed_scaling_factor", Json(0.0));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "routed_scaling_factor must be finite and positive");
  j = tiny_config("deepseek_v2");
  j.set("first_k_dense_replace", Json(int64_t{-1}));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "'first_k_dense_replace' is -1");
  j = tiny_config("deepseek_v2");
  j.set("moe_layer_freq", Json(int64_t{0}));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "'moe_layer_freq' is 0");

  j = tiny_config("deepseek_v3");
  j.set("scoring_func", Json("softmax"));
  expect_error(from_hf(j), StatusCode::kUnimplemented, "scoring_func 'softmax'");
  j = tiny_config("deepseek_v3");
  j.set("topk_method", Json("greedy"));
  expect_error(from_hf(j), StatusCode::kUnimplemented, "topk_method 'greedy'");
  j = tiny_config("deepseek_v3");
  j.set("n_group", Json(int64_t{3}));  // of 4 experts
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "4 experts do not split into 3 equal groups");
  j = tiny_config("deepseek_v3");
  j.set("num_experts_per_tok", Json(int64_t{3}));  // one group of 2 kept
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "top_k 3 must be in [1, 2]");
  j = tiny_config("deepseek_v3");
  j.set("n_group", Json(int64_t{4}));  // groups of one expert have no top-2
  j.set("topk_group", Json(int64_t{2}));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "top-2 sum needs 2 or more experts");
  j = tiny_config("deepseek_v3");
  j.set("n_routed_experts", Json(int64_t{1} << 40));
  expect_error(from_hf(j), StatusCode::kInvalidArgument, "out of range");
}

// configs/deepseek-v2-lite.json (the benchmarks' --load-format dummy config) reads as the
// released checkpoint: 26 MoE layers after a dense one, 64 experts of 1408 (top-6, softmax,
// greedy), two shared experts, and 15.7B weights in all, as DeepSeek states.
TEST(DeepseekMoe, TheV2LiteDummyConfigHasTheCheckpointsShape) {
  auto text = read_text_file(std::string(KVASIR_SOURCE_DIR) + "/configs/deepseek-v2-lite.json", 1u << 20);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  auto j = parse_json(*text);
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  auto c = from_hf(*j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<bool> want(27, true);
  want[0] = false;
  EXPECT_EQ(moe_layers(*c), want);
  const MoeLayerConfig m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.num_experts, 64);
  EXPECT_EQ(m.routing.top_k, 6);
  EXPECT_EQ(m.expert_intermediate_size, 1408);
  EXPECT_EQ(m.shared_intermediate_size, 2 * 1408);
  EXPECT_EQ(m.routing.num_groups, 1);
  auto specs = dummy_weight_specs_for(*c, true);
  ASSERT_TRUE(specs.ok()) << specs.status().to_string();
  double total = 0;
  for (const DummyTensorSpec& t : *specs) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    total += n;
  }
  EXPECT_GT(total, 15.65e9);
  EXPECT_LT(total, 15.75e9);
}

// Dummy weights of a tiny config with the tensors whose names contain `drop` left out.
Status load_without(const std::string& type, const std::string& drop) {
  auto c = from_hf(tiny_config(type));
  if (!c.ok()) return c.status();
  auto specs = dummy_weight_specs_for(*c, false);
  if (!specs.ok()) return specs.status();
  specs->erase(std::remove_if(specs->begin(), specs->end(),
                              [&](const DummyTensorSpec& t) { return t.name.find(drop) != std::string::npos; }),
               specs->end());
  auto src = open_dummy_weights(*specs, 7, "dummy");
  if (!src.ok()) return src.status();
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  auto m = DecoderModel::create(*c, **src, backend, ModelOptions{});
  return m.ok() ? Status() : m.status();
}

TEST(DeepseekMoe, MissingRouterWeightsAreRefusedByName) {
  EXPECT_TRUE(load_without("deepseek_v3", "no such tensor").ok());
  Status s = load_without("deepseek_v3", "e_score_correction_bias");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.1.mlp.gate.e_score_correction_bias"), std::string::npos) << s.message();
  s = load_without("deepseek_v2", "shared_experts.down_proj");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.1.mlp.shared_experts.down_proj.weight"), std::string::npos) << s.message();
  s = load_without("deepseek_v2", "layers.1.mlp.experts.2.gate_proj");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer 1: expert 2 of 4 has no gate weight"), std::string::npos) << s.message();
}

// A llama.cpp "deepseek2" GGUF header: 2 layers, layer 0 dense, 8 experts (top-2) of 16 with one
// shared expert, MLA sizes as the converter writes them.
testing::GgufWriter deepseek2_gguf(uint32_t top_k = 2) {
  testing::GgufWriter w;
  w.add_string("general.architecture", "deepseek2");
  w.add_u32("deepseek2.block_count", 2);
  w.add_u32("deepseek2.context_length", 64);
  w.add_u32("deepseek2.embedding_length", 32);
  w.add_u32("deepseek2.feed_forward_length", 64);
  w.add_u32("deepseek2.attention.head_count", 4);
  w.add_u32("deepseek2.attention.head_count_kv", 1);
  w.add_f32("deepseek2.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_u32("deepseek2.rope.dimension_count", 8);
  w.add_u32("deepseek2.attention.kv_lora_rank", 16);
  w.add_u32("deepseek2.attention.key_length", 16 + 8);
  w.add_u32("deepseek2.attention.value_length", 16);
  w.add_u32("deepseek2.attention.key_length_mla", 16 + 8);
  w.add_u32("deepseek2.attention.value_length_mla", 16);
  w.add_u32("deepseek2.vocab_size", 256);
  w.add_u32("deepseek2.leading_dense_block_count", 1);
  w.add_u32("deepseek2.expert_count", 8);
  w.add_u32("deepseek2.expert_used_count", top_k);
  w.add_u32("deepseek2.expert_feed_forward_length", 16);
  w.add_u32("deepseek2.expert_shared_count", 1);
  return w;
}

StatusOr<ModelConfig> from_gguf(testing::GgufWriter& w) {
  const testing::Bytes b = w.build();
  auto f = GgufFile::parse(std::span<const uint8_t>(b.data(), b.size()));
  if (!f.ok()) return f.status();
  return model_config_from_gguf(**f);
}

TEST(DeepseekMoe, GgufKeysGiveTheRouting) {
  // No gating func, scale or norm: a DeepSeek-V2 file (softmax, unscaled, not renormalized).
  testing::GgufWriter w = deepseek2_gguf();
  auto c = from_gguf(w);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(moe_layers(*c), (std::vector<bool>{false, true}));
  MoeLayerConfig m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.routing.top_k, 2);
  EXPECT_EQ(m.expert_intermediate_size, 16);
  EXPECT_EQ(m.shared_intermediate_size, 16);
  EXPECT_EQ(m.routing.scoring, MoeScoring::kSoftmax);
  EXPECT_FALSE(m.routing.renormalize);
  EXPECT_FLOAT_EQ(m.routing.routed_scaling_factor, 1.0f);
  EXPECT_EQ(m.routing.num_groups, 1);
  EXPECT_FALSE(m.correction_bias);

  // Groups without a correction bias: V2's group_limited_greedy, ranked by the best expert.
  w = deepseek2_gguf();
  w.add_u32("deepseek2.expert_group_count", 2);
  w.add_u32("deepseek2.expert_group_used_count", 1);
  w.add_f32("deepseek2.expert_weights_scale", 16.0f);
  c = from_gguf(w);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.routing.num_groups, 2);
  EXPECT_EQ(m.routing.topk_groups, 1);
  EXPECT_EQ(m.routing.group_score, MoeGroupScore::kMax);
  EXPECT_FLOAT_EQ(m.routing.routed_scaling_factor, 16.0f);

  // V3: sigmoid, renormalized, with exp_probs_b in its first MoE layer: groups by top-2 sum.
  w = deepseek2_gguf();
  w.add_u32("deepseek2.expert_gating_func", 2);
  w.add_bool("deepseek2.expert_weights_norm", true);
  w.add_u32("deepseek2.expert_group_count", 2);
  w.add_u32("deepseek2.expert_group_used_count", 1);
  w.add_tensor("blk.1.exp_probs_b.bias", DType::kF32, {8}, testing::iota_bytes(8 * 4));
  c = from_gguf(w);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  m = deepseek_moe_layer_config(*c);
  EXPECT_EQ(m.routing.scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(m.routing.renormalize);
  EXPECT_TRUE(m.correction_bias);
  EXPECT_EQ(m.routing.group_score, MoeGroupScore::kTop2Sum);

  w = deepseek2_gguf();
  w.add_u32("deepseek2.expert_gating_func", 4);  // sqrt(softplus): not DeepSeek's
  expect_error(from_gguf(w), StatusCode::kUnimplemented, "deepseek2.expert_gating_func 4");
  w = deepseek2_gguf();
  w.add_u32("deepseek2.expert_group_count", 2);  // without expert_group_used_count
  expect_error(from_gguf(w), StatusCode::kNotFound, "deepseek2.expert_group_used_count");
  w = deepseek2_gguf(9);
  expect_error(from_gguf(w), StatusCode::kInvalidArgument, "top_k 9 must be in [1, 8]");
}

}  // namespace
}  // namespace kvasir
