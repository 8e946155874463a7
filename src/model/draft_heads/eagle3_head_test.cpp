// Eagle3Head against the float32 numpy reference of scripts/gen_eagle_heads.py (tests/data/eagle3):
// a pass over six accepted positions fed the target's fused hidden states, then a draft step fed
// the head's own output; logits rel L2 < 1e-3 and the greedy drafts (through d2t) equal. And the
// config checks: every bad field refused with a message naming it.
#include "model/draft_heads/eagle3_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/weight_source.h"
#include "model/draft_heads/draft_head_test_util.h"
#include "model/registry.h"

namespace kvasir {
namespace {

using testing::draft_step_logits;
using testing::first_pass_logits;
using testing::ints;
using testing::read_f32;
using testing::rel_l2;

const std::string kDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/";

std::string head_config_text() {
  auto t = read_text_file(kDir + "tiny_head/config.json");
  EXPECT_TRUE(t.ok());
  return t.ok() ? *t : "";
}

class Eagle3HeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = open_weights(kDir + "tiny_target");
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
    auto hw = open_weights(kDir + "tiny_head");
    ASSERT_TRUE(hw.ok()) << hw.status().to_string();
    head_weights_ = std::move(*hw);
  }
  // The target's captured states of the golden's first pass, as a target forward would leave
  // them: layer j's rows at [j * max_num_tokens, ...), fc's input being the three side by side in
  // layer order.
  void fill_target_states(int num_tokens) {
    const int64_t H = 64;
    const Tensor& aux = target_->aux_hidden_states();
    ASSERT_EQ(aux.dtype, DType::kF32);
    const std::vector<float> fused = read_f32(kDir + "tiny_head/fused_hidden_pass1.f32");
    ASSERT_EQ(fused.size(), static_cast<size_t>(num_tokens * 3 * H));
    for (int i = 0; i < num_tokens; ++i) {
      for (int j = 0; j < 3; ++j) {
        std::memcpy(aux.ptr<float>() + (j * target_->max_num_tokens() + i) * H, fused.data() + (i * 3 + j) * H,
                    H * sizeof(float));
      }
    }
  }
  StatusOr<Eagle3HeadConfig> config_of(const std::string& text) {
    return parse_eagle3_head_config(text, target_config_, "tiny_head");
  }
  std::unique_ptr<WeightSource> target_weights_, head_weights_;
  ModelConfig target_config_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<DecoderModel> target_;
};

TEST_F(Eagle3HeadTest, LogitsAndDraftsMatchTheNumpyReference) {
  auto config = config_of(head_config_text());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->aux_layer_ids, (std::vector<int>{0, 1, 2}));  // listed as [2, 0, 1]: layer order
  auto head = Eagle3Head::create(*config, *head_weights_, *target_, 64, 8);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  auto cache = (*head)->allocate_kv_cache(4, 16);
  ASSERT_TRUE(cache.ok());
  auto golden = parse_json(*read_text_file(kDir + "tiny_head/golden.json"));
  ASSERT_TRUE(golden.ok());
  const Json& p1 = *golden->find("pass1");
  const Json& p2 = *golden->find("pass2");
  ASSERT_NO_FATAL_FAILURE(fill_target_states(static_cast<int>(ints(*p1.find("input_ids")).size())));
  const std::vector<float> logits = first_pass_logits(**head, *cache, p1, 64);
  EXPECT_LT(rel_l2(logits, read_f32(kDir + "tiny_head/logits_pass1.f32")), 1e-3);
  int32_t draft = -1, last = 5, row0 = 0;
  ASSERT_TRUE((*head)->greedy_target_tokens(&last, 1, &draft).ok());
  EXPECT_EQ(draft, p1.find("draft")->as_int());

  // Draft step: position 6, fed draft 1 and the head's own output at position 5.
  const std::vector<float> logits2 = draft_step_logits(**head, *cache, draft, 64);
  EXPECT_LT(rel_l2(logits2, read_f32(kDir + "tiny_head/logits_pass2.f32")), 1e-3);
  ASSERT_TRUE((*head)->greedy_target_tokens(&row0, 1, &draft).ok());
  EXPECT_EQ(draft, p2.find("draft")->as_int());
}

TEST_F(Eagle3HeadTest, NormBeforeResidualMatchesItsReference) {
  auto j = parse_json(head_config_text());
  j->set("norm_before_residual", Json(true));
  auto config = config_of(j->dump());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_TRUE(config->norm_before_residual);
  auto head = Eagle3Head::create(*config, *head_weights_, *target_, 64, 8);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  auto cache = (*head)->allocate_kv_cache(4, 16);
  ASSERT_TRUE(cache.ok());
  auto golden = parse_json(*read_text_file(kDir + "tiny_head/golden.json"));
  const Json& p1 = *golden->find("pass1");
  ASSERT_NO_FATAL_FAILURE(fill_target_states(static_cast<int>(ints(*p1.find("input_ids")).size())));
  const std::vector<float> logits = first_pass_logits(**head, *cache, p1, 64);
  const std::vector<float> want = read_f32(kDir + "tiny_head/logits_pass1_norm_before_residual.f32");
  EXPECT_LT(rel_l2(logits, want), 1e-3);
  // And the flag matters: the default layer's logits are far from these.
  EXPECT_GT(rel_l2(read_f32(kDir + "tiny_head/logits_pass1.f32"), want), 1e-2);
}

TEST_F(Eagle3HeadTest, BadConfigsAreRefusedNamingTheField) {
  const std::string good = head_config_text();
  auto with = [&](const std::string& key, const std::string& value) {
    auto j = parse_json(good);
    j->set(key, *parse_json(value));
    auto c = config_of(j->dump());
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  auto has = [](const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(with("hidden_size", "128"), "hidden_size 128 differs from the target's hidden_size 64"));
  EXPECT_TRUE(has(with("architectures", R"(["LlamaForCausalLMEagle"])"), "is not an EAGLE-3 head"));
  EXPECT_TRUE(has(with("vocab_size", "300"), "vocab_size 300 differs"));
  EXPECT_TRUE(has(with("draft_vocab_size", "512"), "exceeds vocab_size"));
  EXPECT_TRUE(has(with("num_hidden_layers", "2"), "only single-layer"));
  EXPECT_TRUE(has(with("norm_before_residual", "1"), "'norm_before_residual' must be true or false"));
  EXPECT_TRUE(has(with("eagle_config", R"({"eagle_aux_hidden_state_layer_ids": [0, 1, 3]})"),
                  "aux hidden-state layer 3 is outside the target's 3 layers"));
  EXPECT_TRUE(has(with("eagle_config", R"({"eagle_aux_hidden_state_layer_ids": [0, 1, 1]})"), "three distinct"));
  // Not named: vLLM's default (2, L/2, L-3), here (2, 1, 0).
  auto j = parse_json(good);
  j->set("eagle_config", Json::object());
  auto defaults = config_of(j->dump());
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->aux_layer_ids, (std::vector<int>{0, 1, 2}));
  // A head whose weights disagree with its config: lm_head rows are draft_vocab_size.
  auto c = config_of(good);
  ASSERT_TRUE(c.ok());
  c->draft_vocab_size = 32;
  auto head = Eagle3Head::create(*c, *head_weights_, *target_, 64, 8);
  ASSERT_FALSE(head.ok());
  EXPECT_TRUE(has(head.status().message(), "lm_head.weight")) << head.status().message();
}

TEST(Eagle3HeadConfig, TheBenchmarkHeadFitsLlama31_8B) {
  const std::string configs = std::string(KVASIR_SOURCE_DIR) + "/configs/";
  auto target = model_config_from_hf_json(*parse_json(*read_text_file(configs + "llama-3.1-8b.json")), nullptr);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto head = parse_eagle3_head_config(*read_text_file(configs + "eagle3-llama-3.1-8b.json"), *target, "configs");
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_EQ(head->aux_layer_ids, (std::vector<int>{2, 16, 29}));  // vLLM's default for 32 layers
  EXPECT_EQ(head->draft_vocab_size, 32000);
  int64_t params = 0;
  const WeightManifest m = eagle3_head_manifest(*head);
  for (const auto* list : {&m.model, &m.layers[0]}) {
    for (const WeightSpec& s : *list) {
      if (!s.expected) continue;  // the embedding is the target's
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      params += n;
    }
  }
  // fc 4096 x 12288, q/k/v over 8192 columns, o, MLP of 14336, lm_head 32000 x 4096, 4 norms.
  EXPECT_EQ(params, 50331648 + (4096 + 2 * 1024) * int64_t{8192} + 4096 * 4096 + 3 * int64_t{4096} * 14336 +
                        32000 * int64_t{4096} + 4 * 4096);
}

}  // namespace
}  // namespace kvasir
