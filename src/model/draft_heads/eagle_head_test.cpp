// EagleHead (EAGLE-1/2) against the float32 numpy reference of scripts/gen_eagle_heads.py
// (tests/data/eagle): the tiny target runs a 7-token prompt and keeps its final-normed hidden
// states (checked against the reference's), the head's pass over six positions is fed them, then
// a draft step is fed the head's own output; logits rel L2 < 1e-3 and the greedy drafts equal.
// And the config checks: every bad or unsupported field refused with a message naming it, for
// this head and (the keys both heads share) the EAGLE-3 head.
#include "model/draft_heads/eagle_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/weight_source.h"
#include "model/draft_heads/draft_head_test_util.h"
#include "model/draft_heads/eagle3_head_config.h"
#include "model/registry.h"

namespace kvasir {
namespace {

using testing::draft_step_logits;
using testing::first_pass_logits;
using testing::ints;
using testing::read_f32;
using testing::rel_l2;

const std::string kTargetDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/tiny_target";
const std::string kDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle/tiny_head/";

std::string text_of(const std::string& path) {
  auto t = read_text_file(path);
  EXPECT_TRUE(t.ok()) << path;
  return t.ok() ? *t : "";
}

class EagleHeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = open_weights(kTargetDir);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    target_weights_ = std::move(*w);
    auto config = load_model_config(*target_weights_);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    target_config_ = *config;
    CpuBackendOptions bo;
    bo.precision = MatmulPrecision::kExact;
    backend_ = std::make_unique<CpuBackend>(bo);
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_logits = 8;
    auto m = DecoderModel::create(*config, *target_weights_, *backend_, mo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    target_ = std::move(*m);
    auto tc = target_->allocate_kv_cache(8, 16);
    ASSERT_TRUE(tc.ok());
    target_cache_ = std::move(*tc);
    auto hw = open_weights(kDir);
    ASSERT_TRUE(hw.ok()) << hw.status().to_string();
    head_weights_ = std::move(*hw);
  }
  StatusOr<EagleHeadConfig> config_of(const std::string& text) {
    return parse_eagle_head_config(text, target_config_, "tiny_head");
  }
  // The target's prefill over `prompt` at positions 0.. in block 1.
  void run_target(const std::vector<int32_t>& prompt) {
    const int T = static_cast<int>(prompt.size());
    std::vector<int32_t> pos, qsl = {0, T}, lens = {T}, tables = {1};
    std::vector<int64_t> slots;
    for (int p = 0; p < T; ++p) pos.push_back(p), slots.push_back(16 + p);
    ForwardBatch b;
    b.num_tokens = T;
    b.input_ids = prompt.data();
    b.positions = pos.data();
    b.attn = AttentionMetadata{1, T, qsl.data(), lens.data(), tables.data(), 1, slots.data(), 16};
    ASSERT_TRUE(target_->run_layers(b, target_cache_).ok());
  }
  std::unique_ptr<WeightSource> target_weights_, head_weights_;
  ModelConfig target_config_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<DecoderModel> target_;
  KvCache target_cache_;
};

TEST_F(EagleHeadTest, LogitsAndDraftsMatchTheNumpyReference) {
  auto config = config_of(text_of(kDir + "config.json"));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ASSERT_TRUE(config->fc_bias.has_value());
  EXPECT_TRUE(*config->fc_bias);
  auto head = EagleHead::create(*config, *head_weights_, *target_, 64, 8);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_TRUE((*head)->has_fc_bias());
  auto cache = (*head)->allocate_kv_cache(4, 16);
  ASSERT_TRUE(cache.ok());
  auto golden = parse_json(text_of(kDir + "golden.json"));
  ASSERT_TRUE(golden.ok());
  const Json& p1 = *golden->find("pass1");
  const Json& p2 = *golden->find("pass2");
  const int64_t H = 64, V = 256;

  // The target keeps the final-normed state of every token (the vector its lm_head reads).
  run_target(ints(*golden->find("prompt")));
  const Tensor& states = target_->final_hidden_states();
  ASSERT_NE(states.data, nullptr);
  ASSERT_EQ(states.dtype, DType::kF32);
  const std::vector<float> want_states = read_f32(kDir + "target_hidden.f32");
  std::vector<float> got_states(states.ptr<float>(), states.ptr<float>() + 7 * H);
  EXPECT_LT(rel_l2(got_states, want_states), 1e-4);

  const std::vector<float> logits = first_pass_logits(**head, *cache, p1, V);
  EXPECT_LT(rel_l2(logits, read_f32(kDir + "logits_pass1.f32")), 1e-3);
  int32_t draft = -1, last = 5, row0 = 0;
  ASSERT_TRUE((*head)->greedy_target_tokens(&last, 1, &draft).ok());
  EXPECT_EQ(draft, p1.find("draft")->as_int());

  // Draft step: position 6, fed draft 1 and the head's own output at position 5.
  const std::vector<float> logits2 = draft_step_logits(**head, *cache, draft, V);
  EXPECT_LT(rel_l2(logits2, read_f32(kDir + "logits_pass2.f32")), 1e-3);
  ASSERT_TRUE((*head)->greedy_target_tokens(&row0, 1, &draft).ok());
  EXPECT_EQ(draft, p2.find("draft")->as_int());
}

TEST_F(EagleHeadTest, FcBiasFollowsTheCheckpointAndMustAgreeWithTheConfig) {
  auto j = parse_json(text_of(kDir + "config.json"));
  // No "bias" key: the checkpoint's fc.bias is used.
  std::erase_if(j->as_object(), [](const auto& kv) { return kv.first == "bias"; });
  auto open = config_of(j->dump());
  ASSERT_TRUE(open.ok()) << open.status().to_string();
  EXPECT_FALSE(open->fc_bias.has_value());
  auto head = EagleHead::create(*open, *head_weights_, *target_, 64, 8);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_TRUE((*head)->has_fc_bias());
  // "bias": false while the checkpoint holds fc.bias: the two disagree, refused at bind.
  j->set("bias", Json(false));
  auto no_bias = config_of(j->dump());
  ASSERT_TRUE(no_bias.ok());
  auto refused = EagleHead::create(*no_bias, *head_weights_, *target_, 64, 8);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fc.bias"), std::string::npos) << refused.status().message();
}

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

TEST_F(EagleHeadTest, BadAndUnsupportedConfigsAreRefusedNamingTheField) {
  const std::string good = text_of(kDir + "config.json");
  auto with = [&](const std::string& key, const std::string& value) {
    auto j = parse_json(good);
    j->set(key, *parse_json(value));
    auto c = config_of(j->dump());
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  EXPECT_TRUE(has(with("hidden_size", "128"), "hidden_size 128 differs from the target's hidden_size 64"));
  EXPECT_TRUE(has(with("vocab_size", "300"), "vocab_size 300 differs"));
  EXPECT_TRUE(has(with("num_hidden_layers", "2"), "only single-layer EAGLE heads"));
  EXPECT_TRUE(has(with("architectures", R"(["LlamaForCausalLMEagle3"])"), "speculative method \"eagle3\""));
  EXPECT_TRUE(has(with("architectures", R"(["Qwen2ForCausalLM"])"), "is not an EAGLE-1/2 Llama head"));
  EXPECT_TRUE(has(with("model_type", R"("qwen2")"), "model_type \"qwen2\" is not supported"));
  EXPECT_TRUE(has(with("bias", "1"), "'bias' (fc's bias) must be true or false"));
  EXPECT_TRUE(has(with("add_para_norm", "true"), "'add_para_norm': true"));
  EXPECT_TRUE(has(with("logit_scale", "-1"), "'logit_scale' must be a positive number"));
  EXPECT_TRUE(has(with("attention_bias", "true"), "'attention_bias': true is not supported"));
  EXPECT_TRUE(has(with("mlp_bias", "true"), "'mlp_bias': true is not supported"));
  EXPECT_TRUE(has(with("hidden_act", R"("gelu")"), "'hidden_act' \"gelu\" is not supported"));
  EXPECT_TRUE(has(with("sliding_window", "16"), "'sliding_window' 16 is not supported"));
  EXPECT_TRUE(has(with("rope_scaling", R"({"rope_type": "dynamic", "factor": 2.0})"), "rope type 'dynamic' is not supported"));
  EXPECT_TRUE(has(with("quantization_config", R"({"quant_method": "fp8"})"), "key 'quantization_config' is not supported"));
  EXPECT_TRUE(has(with("truncated_vocab_size", "128"), "key 'truncated_vocab_size' is not supported"));
  // Harmless: false biases, metadata, a tie flag (lm_head is the target's either way), logit_scale.
  EXPECT_EQ(with("attention_bias", "false"), "accepted");
  EXPECT_EQ(with("mlp_bias", "false"), "accepted");
  EXPECT_EQ(with("attention_dropout", "0.0"), "accepted");
  EXPECT_EQ(with("tie_word_embeddings", "true"), "accepted");
  EXPECT_EQ(with("logit_scale", "1.0"), "accepted");
  EXPECT_EQ(with("architectures", R"(["LlamaForCausalLM"])"), "accepted");  // the EAGLE checkpoints' own name
}

TEST_F(EagleHeadTest, TheEagle3HeadRefusesKeysItWouldIgnore) {
  const std::string good = text_of(std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/tiny_head/config.json");
  auto with = [&](const std::string& key, const std::string& value) {
    auto j = parse_json(good);
    j->set(key, *parse_json(value));
    auto c = parse_eagle3_head_config(j->dump(), target_config_, "tiny_head");
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  ASSERT_EQ(with("torch_dtype", R"("bfloat16")"), "accepted");
  EXPECT_TRUE(has(with("mlp_bias", "true"), "'mlp_bias': true is not supported"));
  EXPECT_TRUE(has(with("attention_bias", "true"), "'attention_bias': true is not supported"));
  EXPECT_TRUE(has(with("tie_word_embeddings", "true"), "'tie_word_embeddings': true is not supported"));
  EXPECT_TRUE(has(with("rope_scaling", R"({"rope_type": "dynamic", "factor": 2.0})"), "rope type 'dynamic' is not supported"));
  EXPECT_TRUE(has(with("quantization_config", R"({"quant_method": "fp8"})"), "key 'quantization_config' is not supported"));
  EXPECT_TRUE(has(with("eagle_config", R"({"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": false})"),
                  "eagle_config.use_aux_hidden_state false is not supported"));
  EXPECT_TRUE(has(with("eagle_config", "[1]"), "'eagle_config' must be an object"));
  EXPECT_EQ(with("eagle_config", R"({"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": true})"),
            "accepted");
}

TEST(EagleHeadConfig, TheBenchmarkHeadFitsLlama3_8B) {
  const std::string configs = std::string(KVASIR_SOURCE_DIR) + "/configs/";
  auto target = model_config_from_hf_json(*parse_json(text_of(configs + "llama-3.1-8b.json")), nullptr);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto head = parse_eagle_head_config(text_of(configs + "eagle-llama-3-8b.json"), *target, "configs");
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  ASSERT_TRUE(head->fc_bias.has_value());
  EXPECT_TRUE(*head->fc_bias);
  int64_t params = 0;
  const WeightManifest m = eagle_head_manifest(*head);
  for (const auto* list : {&m.model, &m.layers[0]}) {
    for (const WeightSpec& s : *list) {
      if (!s.expected) continue;
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      params += n;
    }
  }
  // fc 4096 x 8192 + bias, q/o 4096 x 4096, k/v 1024 x 4096, MLP of 14336, one norm: EAGLE-LLaMA3's
  // 0.25 B parameters besides the target's embedding and lm_head.
  EXPECT_EQ(params, 4096 * int64_t{8192} + 4096 + 2 * int64_t{4096} * 4096 + 2 * int64_t{1024} * 4096 +
                        3 * int64_t{4096} * 14336 + 4096);
}

}  // namespace
}  // namespace kvasir
