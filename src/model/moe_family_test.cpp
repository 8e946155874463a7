// The MoE families' config and load-time checks: routing numbers that cannot run are refused with
// the key's file named, dense layers follow mlp_only_layers / decoder_sparse_step, a checkpoint
// missing one expert's weight or holding one of the wrong shape is refused by name, and a llama.cpp
// "llama" GGUF with experts is read as Mixtral.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "loader/dummy_weights.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"
#include "model/tiny_config_test_util.h"

namespace kvasir {
namespace {

using test_util::tiny_config;

const char* const kMoeTypes[] = {"mixtral", "qwen3_moe", "qwen2_moe"};

TEST(MoeFamily, RoutingThatCannotRunIsRefusedAtConfig) {
  for (const char* type : kMoeTypes) {
    Json j = tiny_config(type);
    j.set("num_experts_per_tok", Json(int64_t{5}));  // of 4 experts
    auto c = model_config_from_hf_json(j, nullptr);
    ASSERT_FALSE(c.ok()) << type;
    EXPECT_NE(c.status().message().find("config.json"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("top_k 5 must be in [1, 4]"), std::string::npos) << c.status().message();
    Json zero = tiny_config(type);
    zero.set("num_experts_per_tok", Json(int64_t{0}));
    EXPECT_FALSE(model_config_from_hf_json(zero, nullptr).ok()) << type;
  }
  Json j = tiny_config("qwen3_moe");
  j.set("moe_intermediate_size", Json(int64_t{-3}));
  EXPECT_FALSE(model_config_from_hf_json(j, nullptr).ok());
  j = tiny_config("qwen3_moe");
  j.set("norm_topk_prob", Json("yes"));
  EXPECT_FALSE(model_config_from_hf_json(j, nullptr).ok());
}

// Which layers of a config got MoE weights in the family's manifest.
std::vector<bool> moe_layers(const Json& j) {
  auto c = model_config_from_hf_json(j, nullptr);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return {};
  auto f = family_of(*c);
  const WeightManifest m = (*f)->manifest(*c);
  std::vector<bool> out;
  for (const auto& layer : m.layers) out.push_back(m.find(layer, "ffn_gate_inp.weight") != nullptr);
  return out;
}

TEST(MoeFamily, DenseLayersFollowMlpOnlyLayersAndTheSparseStep) {
  Json j = tiny_config("qwen3_moe");
  j.set("num_hidden_layers", Json(int64_t{4}));
  EXPECT_EQ(moe_layers(j), (std::vector<bool>{true, false, true, true}));  // mlp_only_layers [1]
  j.set("decoder_sparse_step", Json(int64_t{2}));
  EXPECT_EQ(moe_layers(j), (std::vector<bool>{false, false, false, true}));
  j = tiny_config("mixtral");  // Mixtral has no dense layers: mlp_only_layers is not its key
  EXPECT_EQ(moe_layers(j), (std::vector<bool>{true, true}));
}

// Dummy weights of a tiny config, with `edit` applied to the list first.
template <typename Edit>
Status load_edited(const std::string& type, Edit edit) {
  auto c = model_config_from_hf_json(tiny_config(type), nullptr);
  if (!c.ok()) return c.status();
  auto specs = dummy_weight_specs_for(*c, false);
  if (!specs.ok()) return specs.status();
  edit(*specs);
  auto src = open_dummy_weights(*specs, 7, "dummy");
  if (!src.ok()) return src.status();
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  auto m = DecoderModel::create(*c, **src, backend, ModelOptions{});
  return m.ok() ? Status() : m.status();
}

TEST(MoeFamily, MissingOrMisshapenExpertsAreRefusedByName) {
  for (const char* type : kMoeTypes) {
    ASSERT_TRUE(load_edited(type, [](std::vector<DummyTensorSpec>&) {}).ok()) << type;
    const std::string up = std::string(type) == "mixtral" ? "experts.3.w3.weight" : "experts.3.up_proj.weight";
    Status s = load_edited(type, [&](std::vector<DummyTensorSpec>& specs) {
      specs.erase(std::remove_if(specs.begin(), specs.end(),
                                 [&](const DummyTensorSpec& t) { return t.name.find("layers.0.") != std::string::npos &&
                                                                        t.name.find(up) != std::string::npos; }),
                  specs.end());
    });
    ASSERT_FALSE(s.ok()) << type;
    EXPECT_NE(s.message().find("layer 0: expert 3 of 4 has no up weight"), std::string::npos) << s.message();
    s = load_edited(type, [&](std::vector<DummyTensorSpec>& specs) {
      for (DummyTensorSpec& t : specs) {
        if (t.name.find("layers.0.") != std::string::npos && t.name.find(up) != std::string::npos) t.shape[0] += 1;
      }
    });
    ASSERT_FALSE(s.ok()) << type;
    EXPECT_NE(s.message().find(up + " has shape ["), std::string::npos) << s.message();
  }
  // Qwen2-MoE's shared expert and its gate are required.
  Status s = load_edited("qwen2_moe", [](std::vector<DummyTensorSpec>& specs) {
    specs.erase(std::remove_if(specs.begin(), specs.end(),
                               [](const DummyTensorSpec& t) { return t.name.find("shared_expert_gate") != std::string::npos; }),
                specs.end());
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shared_expert_gate"), std::string::npos) << s.message();
}

TEST(MoeFamily, LlamaGgufWithExpertsIsMixtral) {
  const std::string tiny = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/";
  for (const auto& [file, family] : {std::pair<std::string, std::string>{"mixtral/model.gguf", "mixtral"},
                                     {"llama3/model.gguf", "llama"}}) {
    auto w = open_weights(tiny + file);
    ASSERT_TRUE(w.ok()) << file << ": " << w.status().to_string();
    auto c = load_model_config(**w);
    ASSERT_TRUE(c.ok()) << file << ": " << c.status().to_string();
    EXPECT_EQ(c->architecture, family) << file;
  }
  EXPECT_EQ(find_family_by_gguf("llama")->name(), "llama");
}

}  // namespace
}  // namespace kvasir
