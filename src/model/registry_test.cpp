// The model registry: lookups by GGUF and HF names, refusal of unknown families with the list of
// supported ones, and agreement between a family's manifest, its dummy weights and what the
// decoder binds (every family builds and runs a forward on dummy weights).
#include "model/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <span>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "loader/dummy_weights.h"
#include "loader/gguf_file.h"
#include "loader/test_writers.h"
#include "model/decoder_model.h"
#include "model/one_sequence_batch.h"
#include "model/tiny_config_test_util.h"

namespace kvasir {
namespace {

using test_util::tiny_config;
Json parse(const std::string& s) { return test_util::parse_json_or_fail(s); }

TEST(ModelRegistry, FindsFamiliesByEveryName) {
  ASSERT_NE(find_family_by_gguf("llama"), nullptr);
  EXPECT_EQ(find_family_by_gguf("llama")->name(), "llama");
  EXPECT_EQ(find_family_by_gguf("gemma3")->name(), "gemma3");
  EXPECT_EQ(find_family_by_gguf("mistral"), nullptr);  // llama.cpp writes Mistral as "llama"
  EXPECT_EQ(find_family_by_hf({"gemma3_text", {}})->name(), "gemma3");
  EXPECT_EQ(find_family_by_hf({"qwen3", {"Qwen3ForCausalLM"}})->name(), "qwen3");
  // Without a model_type the architectures list decides; with one, model_type does.
  EXPECT_EQ(find_family_by_hf({"", {"LlamaForCausalLM"}})->name(), "llama");
  EXPECT_EQ(find_family_by_hf({"mamba", {"LlamaForCausalLM"}}), nullptr);
  EXPECT_EQ(find_family_by_hf({"mamba", {"MambaForCausalLM"}}), nullptr);
  for (const ModelFamily* f : model_families()) {
    EXPECT_EQ(find_family(f->name()), f);
    EXPECT_EQ(f->config_traits().family, f->name());
  }
}

TEST(ModelRegistry, UnknownArchitectureIsRefusedWithTheSupportedList) {
  auto c = model_config_from_hf_json(tiny_config("mamba"), nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("'mamba'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(supported_families()), std::string::npos);
  EXPECT_NE(supported_families().find("llama, "), std::string::npos);
  EXPECT_NE(supported_families().find("gemma3"), std::string::npos);

  ModelConfig bad = *model_config_from_hf_json(tiny_config("llama"), nullptr);
  bad.architecture = "rwkv6";
  auto f = family_of(bad);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("rwkv6"), std::string::npos);
  EXPECT_NE(f.status().message().find(supported_families()), std::string::npos);
  CpuBackend backend(CpuBackendOptions{});
  auto src = open_dummy_weights({}, 1, "none");
  ASSERT_TRUE(src.ok());
  auto m = DecoderModel::create(bad, **src, backend, ModelOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rwkv6"), std::string::npos);
}

TEST(ModelRegistry, NamesFromTheFileAreQuotedEscaped) {
  // config.json's model_type and architectures, and a GGUF's general.architecture, are file
  // bytes: a CR or an escape sequence in them must not reach the `kvasir serve:` line raw.
  Json j = tiny_config("ll\rama\x1b[2J");
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model_type 'll\\rama\\x1B[2J'"), std::string::npos)
      << c.status().message();
  Json arch = parse(R"({"architectures": ["Foo\nBar"], "hidden_size": 64})");
  auto a = model_config_from_hf_json(arch, nullptr);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("architectures 'Foo\\nBar'"), std::string::npos)
      << a.status().message();
  testing::GgufWriter w;
  w.add_string("general.architecture", "ll\rama");
  const testing::Bytes b = w.build();
  auto f = GgufFile::parse(std::span<const uint8_t>(b.data(), b.size()));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto g = model_config_from_gguf(**f);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("architecture 'll\\rama'"), std::string::npos)
      << g.status().message();
}

TEST(ModelRegistry, DummySpecsFollowTheManifestInTheirHistoricalOrder) {
  // The order seeds the dummy values: it must stay the order dummy weights always had.
  auto c = model_config_from_hf_json(tiny_config("qwen2"), nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto specs = dummy_weight_specs_for(*c, false);
  ASSERT_TRUE(specs.ok());
  std::vector<std::string> names;
  for (const auto& s : *specs) names.push_back(s.name);
  const std::vector<std::string> head = {
      "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
      "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
      "model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.q_proj.bias",
      "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.bias",
      "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"};
  ASSERT_EQ(names.size(), 3 + 2 * (head.size() - 3));
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(names[i], head[i]);
  EXPECT_EQ((*specs)[1].dtype, DType::kF32);
  EXPECT_FLOAT_EQ((*specs)[0].scale, 1.0f / 8.0f);  // 1 / sqrt(hidden)

  auto g = model_config_from_hf_json(tiny_config("gemma3_text"), nullptr);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto gs = dummy_weight_specs_for(*g, false);
  ASSERT_TRUE(gs.ok());
  std::set<std::string> gnames;
  for (const auto& s : *gs) gnames.insert(s.name);
  EXPECT_TRUE(gnames.count("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_TRUE(gnames.count("model.layers.1.pre_feedforward_layernorm.weight"));
  EXPECT_FALSE(gnames.count("model.layers.1.self_attn.q_proj.bias"));
  EXPECT_FLOAT_EQ((*gs)[1].offset, 0.0f);  // HF Gemma norms: 1 + w, so w near 0
}

TEST(ModelRegistry, EveryFamilyBindsExactlyItsDummyWeightsAndRuns) {
  for (const ModelFamily* f : model_families()) {
    const std::string type = f->hf_model_types().front();
    auto c = model_config_from_hf_json(tiny_config(type), nullptr);
    ASSERT_TRUE(c.ok()) << type << ": " << c.status().to_string();
    EXPECT_EQ(c->architecture, f->name());
    auto specs = dummy_weight_specs_for(*c, false);
    ASSERT_TRUE(specs.ok());
    auto src = open_dummy_weights(*specs, 7, "dummy");
    ASSERT_TRUE(src.ok());
    CpuBackend backend(CpuBackendOptions{});
    ModelOptions mo;
    mo.max_num_tokens = 32;
    mo.max_num_logits = 4;
    auto m = DecoderModel::create(*c, **src, backend, mo);
    ASSERT_TRUE(m.ok()) << type << ": " << m.status().to_string();
    OneSequence seq({1, 5, 9, 3, 7});
    auto cache = (*m)->allocate_kv_cache(1, 16);
    ASSERT_TRUE(cache.ok());
    std::vector<float> logits(static_cast<size_t>(c->vocab_size));
    ASSERT_TRUE((*m)->forward(seq.batch, *cache, logits.data()).ok());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << type;

    // Leaving out any non-optional weight of the manifest is refused, naming it.
    const WeightManifest manifest = f->manifest(*c);
    std::vector<DummyTensorSpec> fewer = *specs;
    fewer.erase(fewer.begin() + 4);  // a layer-0 weight
    auto src2 = open_dummy_weights(fewer, 7, "dummy");
    auto m2 = DecoderModel::create(*c, **src2, backend, mo);
    ASSERT_FALSE(m2.ok()) << type;
    EXPECT_NE(m2.status().message().find((*specs)[4].name), std::string::npos)
        << m2.status().message();
    EXPECT_EQ(manifest.layers.size(), static_cast<size_t>(c->num_layers));
  }
}

TEST(ModelRegistry, WrongWeightShapeIsRefused) {
  auto c = model_config_from_hf_json(tiny_config("llama"), nullptr);
  ASSERT_TRUE(c.ok());
  auto specs = *dummy_weight_specs_for(*c, false);
  for (auto& s : specs) {
    if (s.name == "model.layers.1.mlp.up_proj.weight") s.shape = {95, 64};
  }
  auto src = open_dummy_weights(specs, 7, "dummy");
  CpuBackend backend(CpuBackendOptions{});
  auto m = DecoderModel::create(*c, **src, backend, ModelOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("up_proj"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("[95, 64]"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace kvasir
