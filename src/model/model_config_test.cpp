// ModelConfig as read through the model registry: each family's traits applied to real and
// hand-written GGUF metadata and HF config.json files.
#include <gtest/gtest.h>

#include <cstring>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/gguf_file.h"
#include "loader/test_writers.h"
#include "loader/weight_source.h"
#include "model/registry.h"

namespace kvasir {
namespace {

const std::string kModels = std::string(KVASIR_SOURCE_DIR) + "/models/";
const std::string kSmol = kModels + "SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGemma = kModels + "gemma-3-270m-q4_k_m.gguf";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// The published config.json of HuggingFaceTB/SmolLM2-135M-Instruct (the fields that matter).
const char* kSmolConfig = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
  "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9,
  "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "vocab_size": 49152})";

// google/gemma-3-270m config.json as written by transformers 4.5x.
const char* kGemmaConfig = R"({
  "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
  "attn_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": 1,
  "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 640, "intermediate_size": 2048,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
  "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
  "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": 512, "vocab_size": 262144})";
const char* kGemmaGeneration = R"({"eos_token_id": [1, 106], "pad_token_id": 0, "top_k": 64})";

Json parse(const std::string& s) {
  auto j = parse_json(s);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? *j : Json();
}

// config.json text with `key` replaced (or added) by `value_json`.
std::string with(const char* base, const std::string& key, const std::string& value_json) {
  Json j = parse(base);
  j.set(key, parse(value_json));
  return j.dump();
}

StatusOr<ModelConfig> from_hf(const std::string& config, const char* generation = nullptr) {
  Json c = parse(config);
  if (generation == nullptr) return model_config_from_hf_json(c, nullptr);
  Json g = parse(generation);
  return model_config_from_hf_json(c, &g);
}

void expect_error(const StatusOr<ModelConfig>& c, const char* word) {
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << word;
  EXPECT_NE(c.status().message().find(word), std::string::npos) << c.status().message();
}

std::vector<bool> gemma3_270m_pattern() {
  std::vector<bool> v(18, true);
  v[5] = v[11] = v[17] = false;
  return v;
}

TEST(ModelConfig, SmolLM2FromGguf) {
  if (!exists(kSmol)) GTEST_SKIP() << kSmol << " missing";
  auto f = GgufFile::open(kSmol);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto c = model_config_from_gguf(**f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5, 1e-12);
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000.0);
  EXPECT_DOUBLE_EQ(c->rope_theta_local, 100000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->layer_is_sliding, std::vector<bool>(30, false));
  EXPECT_FALSE(c->qk_norm);
  EXPECT_DOUBLE_EQ(c->embedding_scale, 1.0);
  EXPECT_DOUBLE_EQ(c->norm_weight_offset, 0.0);
  EXPECT_DOUBLE_EQ(c->attention_scale(), 1.0 / 8.0);
  EXPECT_EQ(c->activation, Activation::kSilu);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c->pad_token_id, 2);
  EXPECT_FALSE(c->to_string().empty());
}

TEST(ModelConfig, Gemma3FromGguf) {
  if (!exists(kGemma)) GTEST_SKIP() << kGemma << " missing";
  auto src = open_weights(kGemma);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto c = load_model_config(**src);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->vocab_size, 262144);
  EXPECT_EQ(c->hidden_size, 640);
  EXPECT_EQ(c->intermediate_size, 2048);
  EXPECT_EQ(c->num_layers, 18);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_EQ(c->head_dim, 256);  // explicit: 4 * 256 != 640
  EXPECT_EQ(c->rotary_dim, 256);
  EXPECT_NEAR(c->rms_norm_eps, 1e-6, 1e-12);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope_theta_local, 1e4);
  EXPECT_EQ(c->rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c->max_position_embeddings, 32768);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window, 512);
  EXPECT_EQ(c->layer_is_sliding, gemma3_270m_pattern());
  EXPECT_FALSE(c->attn_logit_softcapping.has_value());
  EXPECT_FALSE(c->final_logit_softcapping.has_value());
  EXPECT_DOUBLE_EQ(c->query_pre_attn_scalar, 256.0);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->post_block_norms);
  EXPECT_DOUBLE_EQ(c->embedding_scale, std::sqrt(640.0));
  EXPECT_DOUBLE_EQ(c->norm_weight_offset, 0.0);  // GGUF norms already hold 1 + w
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_EQ(c->bos_token_id, 2);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c->pad_token_id, 0);
}

TEST(ModelConfig, HfConfigsAgreeWithTheirGgufConversions) {
  auto smol = from_hf(kSmolConfig);
  ASSERT_TRUE(smol.ok()) << smol.status().to_string();
  EXPECT_EQ(smol->architecture, "llama");
  EXPECT_EQ(smol->head_dim, 64);
  EXPECT_EQ(smol->rope_style, RopeStyle::kNeox);  // HF weights are not permuted
  EXPECT_TRUE(smol->tie_word_embeddings);
  EXPECT_EQ(smol->eos_token_ids, (std::vector<int64_t>{2}));

  auto gemma = from_hf(kGemmaConfig, kGemmaGeneration);
  ASSERT_TRUE(gemma.ok()) << gemma.status().to_string();
  EXPECT_EQ(gemma->architecture, "gemma3");
  EXPECT_EQ(gemma->head_dim, 256);
  EXPECT_DOUBLE_EQ(gemma->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(gemma->rope_theta_local, 1e4);
  EXPECT_EQ(gemma->sliding_window, 512);
  EXPECT_EQ(gemma->layer_is_sliding, gemma3_270m_pattern());
  EXPECT_DOUBLE_EQ(gemma->norm_weight_offset, 1.0);  // HF Gemma stores w, computes 1 + w
  EXPECT_DOUBLE_EQ(gemma->embedding_scale, std::sqrt(640.0));
  EXPECT_EQ(gemma->eos_token_ids, (std::vector<int64_t>{1, 106}));  // generation_config wins
  EXPECT_TRUE(gemma->tie_word_embeddings);                          // Gemma's default

  for (const std::string& path : {kSmol, kGemma}) {
    if (!exists(path)) continue;
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok());
    auto g = model_config_from_gguf(**f);
    ASSERT_TRUE(g.ok());
    const ModelConfig& h = path == kSmol ? *smol : *gemma;
    EXPECT_EQ(g->vocab_size, h.vocab_size);
    EXPECT_EQ(g->hidden_size, h.hidden_size);
    EXPECT_EQ(g->intermediate_size, h.intermediate_size);
    EXPECT_EQ(g->num_layers, h.num_layers);
    EXPECT_EQ(g->num_kv_heads, h.num_kv_heads);
    EXPECT_EQ(g->head_dim, h.head_dim);
    EXPECT_NEAR(g->rms_norm_eps, h.rms_norm_eps, 1e-12);
    EXPECT_DOUBLE_EQ(g->rope_theta, h.rope_theta);
    EXPECT_DOUBLE_EQ(g->rope_theta_local, h.rope_theta_local);
    EXPECT_EQ(g->layer_is_sliding, h.layer_is_sliding);
    EXPECT_EQ(g->max_position_embeddings, h.max_position_embeddings);
    EXPECT_DOUBLE_EQ(g->query_pre_attn_scalar, h.query_pre_attn_scalar);
    EXPECT_EQ(g->bos_token_id, h.bos_token_id);
  }
}

TEST(ModelConfig, TransformersFiveRopeParametersAndTextConfig) {
  // transformers 5.x: per-layer-type rope_parameters, no rope_theta / rope_local_base_freq.
  std::string v5 = with(kGemmaConfig, "rope_parameters",
                        R"({"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "linear", "factor": 8.0,
                                               "rope_theta": 1000000.0}})");
  Json j = parse(v5);
  j.set("rope_theta", Json());
  j.set("rope_local_base_freq", Json());
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope_theta_local, 1e4);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);

  // A multimodal wrapper: the text model sits in text_config.
  Json outer = Json::object();
  outer.set("model_type", "gemma3");
  outer.set("text_config", parse(kGemmaConfig));
  auto mm = model_config_from_hf_json(outer, nullptr);
  ASSERT_TRUE(mm.ok()) << mm.status().to_string();
  EXPECT_EQ(mm->hidden_size, 640);

  // Without layer_types the gemma3 period of 6 applies.
  Json old = parse(kGemmaConfig);
  old.set("layer_types", Json());
  auto p = model_config_from_hf_json(old, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->layer_is_sliding, gemma3_270m_pattern());
}

TEST(ModelConfig, RopeScalingVariants) {
  auto llama3 = from_hf(with(kSmolConfig, "rope_scaling",
                             R"({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  ASSERT_TRUE(llama3.ok()) << llama3.status().to_string();
  EXPECT_EQ(llama3->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(llama3->rope_scaling.factor, 32.0);
  EXPECT_EQ(llama3->rope_scaling.original_max_position_embeddings, 8192);
  auto yarn = from_hf(with(kSmolConfig, "rope_scaling", R"({"type": "yarn", "factor": 4.0})"));
  ASSERT_TRUE(yarn.ok()) << yarn.status().to_string();
  EXPECT_EQ(yarn->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(yarn->rope_scaling.original_max_position_embeddings, 8192);
  expect_error(from_hf(with(kSmolConfig, "rope_scaling", R"({"type": "dynamic", "factor": 2})")),
               "dynamic");
  expect_error(
      from_hf(with(kSmolConfig, "rope_scaling", R"({"rope_type": "llama3", "factor": 8})")),
      "original_max_position_embeddings");
  expect_error(from_hf(with(kSmolConfig, "rope_scaling", R"({"type": "linear", "factor": -2})")),
               "factor");
}

TEST(ModelConfig, LongropeFollowsTransformersDefaults) {
  // transformers 5.x spelling: rope_parameters holds the factors and partial_rotary_factor.
  Json j = parse(kSmolConfig);
  j.set("rope_theta", Json());
  j.set("original_max_position_embeddings", 4096);
  j.set("rope_parameters", parse(R"({"rope_type": "longrope", "rope_theta": 10000.0,
      "partial_rotary_factor": 0.75, "short_factor": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
      2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]})"));
  auto c = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLongrope);
  EXPECT_EQ(c->rotary_dim, 48);  // 0.75 * 64
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);  // max 8192 / original 4096
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, std::sqrt(1 + std::log(2.0) / std::log(4096.0)));
  // transformers 4.x spelling ("su"), explicit attention_factor; factors must cover rotary_dim / 2.
  Json old = parse(kSmolConfig);
  old.set("rope_scaling", parse(R"({"type": "su", "attention_factor": 1.5, "short_factor": [1, 2],
                                    "long_factor": [3, 4]})"));
  expect_error(model_config_from_hf_json(old, nullptr), "short_factor");
  old.set("head_dim", 4);
  old.set("num_attention_heads", 9);
  auto su = model_config_from_hf_json(old, nullptr);
  ASSERT_TRUE(su.ok()) << su.status().to_string();
  EXPECT_DOUBLE_EQ(su->rope_scaling.attention_factor, 1.5);
  EXPECT_EQ(su->rope_scaling.long_factor, (std::vector<double>{3, 4}));
}

TEST(ModelConfig, Phi3LongropeUsesPhi3Defaults) {
  const std::string dir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/phi3_longrope";
  auto c = model_config_from_hf_dir(dir);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "phi3");
  EXPECT_EQ(c->rotary_dim, 12);  // head_dim 16 * partial_rotary_factor 0.75
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 16);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);  // 64 / 16
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, std::sqrt(1.5));  // 1 + ln 4 / ln 16

  // Phi3Config's own default original length (4096) when the file gives none.
  auto text = read_text_file(dir + "/config.json", 1 << 20);
  ASSERT_TRUE(text.ok());
  Json j = parse(*text);
  j.set("original_max_position_embeddings", Json());
  Json rp = *j.find("rope_parameters");
  rp.set("original_max_position_embeddings", Json());
  j.set("rope_parameters", rp);
  j.set("max_position_embeddings", 131072);
  auto d = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(d->rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(d->rope_scaling.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)));

  rp.set("rope_type", "yarn");
  j.set("rope_parameters", rp);
  expect_error(model_config_from_hf_json(j, nullptr), "yarn");
}

TEST(ModelConfig, OtherFamilies) {
  std::string qwen = with(kSmolConfig, "model_type", R"("qwen2")");
  qwen = with(qwen.c_str(), "sliding_window", "131072");
  qwen = with(qwen.c_str(), "use_sliding_window", "false");
  auto q = from_hf(qwen);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_TRUE(q->attention_bias);
  EXPECT_EQ(q->sliding_window, 0);  // written but unused
  auto m = from_hf(
      with(with(kSmolConfig, "model_type", R"("mistral")").c_str(), "sliding_window", "4096"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layer_is_sliding, std::vector<bool>(30, true));
  std::string g2 = with(kGemmaConfig, "model_type", R"("gemma2")");
  Json j = parse(g2);
  j.set("layer_types", Json());
  j.set("attn_logit_softcapping", 50.0);
  j.set("final_logit_softcapping", 30.0);
  auto g = model_config_from_hf_json(j, nullptr);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(*g->attn_logit_softcapping, 50.0);
  EXPECT_EQ(*g->final_logit_softcapping, 30.0);
  EXPECT_TRUE(g->layer_is_sliding[0]);
  EXPECT_FALSE(g->layer_is_sliding[1]);
  EXPECT_FALSE(g->qk_norm);
}

TEST(ModelConfig, InvalidHfConfigsNameTheField) {
  expect_error(from_hf(with(kSmolConfig, "num_key_value_heads", "4")), "num_kv_heads");
  expect_error(from_hf(with(kSmolConfig, "num_attention_heads", "7")), "multiple");
  expect_error(from_hf(with(kSmolConfig, "vocab_size", "-3")), "vocab_size");
  expect_error(from_hf(with(kSmolConfig, "vocab_size", "null")), "vocab_size");
  expect_error(from_hf(with(kSmolConfig, "hidden_size", R"("576")")), "hidden_size");
  expect_error(from_hf(with(kSmolConfig, "hidden_size", "5.5")), "hidden_size");
  expect_error(from_hf(with(kSmolConfig, "hidden_size", "1e300")), "hidden_size");
  expect_error(from_hf(with(kSmolConfig, "num_hidden_layers", "100000000000")), "num_layers");
  expect_error(from_hf(with(kSmolConfig, "model_type", R"("mamba")")), "mamba");
  expect_error(from_hf(with(kSmolConfig, "eos_token_id", "49152")), "eos_token_id");
  expect_error(from_hf(with(kSmolConfig, "eos_token_id", R"([2, "x"])")), "eos_token_id");
  expect_error(from_hf(with(kSmolConfig, "hidden_act", R"("relu")")), "relu");
  expect_error(from_hf(with(kSmolConfig, "rms_norm_eps", "0")), "rms_norm_eps");
  expect_error(from_hf(with(kSmolConfig, "head_dim", "8192")), "head_dim");
  expect_error(from_hf(with(kSmolConfig, "partial_rotary_factor", "0.3")), "partial_rotary_factor");
  expect_error(from_hf(with(kGemmaConfig, "layer_types", R"(["full_attention"])")), "layer_types");
  expect_error(from_hf(with(kGemmaConfig, "sliding_window", "null")), "sliding_window");
  expect_error(model_config_from_hf_json(parse("[1]"), nullptr), "object");
  expect_error(from_hf(R"({"model_type": "llama"})"), "vocab_size");
}

// config.json values get the checks GGUF metadata gets, each error naming the file and its key
// (issue 14: these were accepted, or silently replaced by generation_config.json's).
TEST(ModelConfig, HfValuesAreCheckedAndNamedByTheirKey) {
  // Token ids: in [0, vocab_size), in either file, even where the other file overrides them.
  expect_error(from_hf(with(kSmolConfig, "eos_token_id", "49152"), R"({"eos_token_id": 2})"),
               "config.json: 'eos_token_id' is 49152");
  expect_error(from_hf(kSmolConfig, R"({"eos_token_id": [2, 49152]})"),
               "generation_config.json: 'eos_token_id' is 49152");
  expect_error(from_hf(with(kSmolConfig, "eos_token_id", "-1")), "'eos_token_id' is -1");
  expect_error(from_hf(with(kSmolConfig, "bos_token_id", "-1")), "'bos_token_id' is -1");
  expect_error(from_hf(kSmolConfig, R"({"bos_token_id": 49152})"), "'bos_token_id' is 49152");
  expect_error(from_hf(with(kSmolConfig, "pad_token_id", "-2")), "'pad_token_id' is -2");
  expect_error(from_hf(with(kSmolConfig, "pad_token_id", "49152")), "'pad_token_id' is 49152");
  // -1 is how older LLaMA conversions say "no padding token": accepted as none.
  auto no_pad = from_hf(with(kSmolConfig, "pad_token_id", "-1"));
  ASSERT_TRUE(no_pad.ok()) << no_pad.status().to_string();
  EXPECT_EQ(no_pad->pad_token_id, -1);
  // Sizes: positive, named as config.json names them.
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim",
                          "max_position_embeddings"}) {
    for (const char* v : {"0", "-1"}) {
      expect_error(from_hf(with(kSmolConfig, key, v)),
                   ("'" + std::string(key) + "' is " + v + ", must be a positive integer").c_str());
    }
  }
  // RoPE scaling: a factor the file gives must scale (linear, llama3, yarn and longrope alike).
  for (const char* type : {"linear", "llama3", "yarn", "longrope"}) {
    for (const char* f : {"0", "-2"}) {
      const std::string rope = std::string(R"({"rope_type": ")") + type + R"(", "factor": )" + f +
                               R"(, "original_max_position_embeddings": 8192})";
      expect_error(from_hf(with(kSmolConfig, "rope_scaling", rope)),
                   ("rope_scaling: 'factor' is " + std::string(f)).c_str());
    }
  }
  // Sliding windows: no negative window, no period below 1, no negative first sliding layer.
  expect_error(from_hf(with(kSmolConfig, "sliding_window", "-5")), "'sliding_window' is -5");
  const std::string periodic = with(kGemmaConfig, "layer_types", "null");  // the period decides
  ASSERT_TRUE(from_hf(periodic).ok());
  expect_error(from_hf(with(periodic.c_str(), "_sliding_window_pattern", "0")),
               "'_sliding_window_pattern' is 0");
  std::string qwen = with(kSmolConfig, "model_type", R"("qwen2")");
  qwen = with(qwen.c_str(), "use_sliding_window", "true");
  qwen = with(qwen.c_str(), "sliding_window", "4096");
  expect_error(from_hf(with(qwen.c_str(), "max_window_layers", "-1")), "'max_window_layers' is -1");
  ASSERT_TRUE(from_hf(with(qwen.c_str(), "max_window_layers", "28")).ok());
}

// A GGUF with llama metadata built in the test, to corrupt one key at a time.
testing::GgufWriter llama_gguf(uint32_t layers = 2, uint32_t heads = 4) {
  testing::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", layers);
  w.add_u32("llama.context_length", 2048);
  w.add_u32("llama.embedding_length", 64);
  w.add_u32("llama.feed_forward_length", 128);
  w.add_u32("llama.attention.head_count", heads);
  w.add_u32("llama.attention.head_count_kv", 2);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_array("tokenizer.ggml.tokens", testing::GgufWriter::string_array({"a", "b", "c"}));
  return w;
}

StatusOr<ModelConfig> from_gguf_bytes(const testing::Bytes& b) {
  auto f = GgufFile::parse(b);
  if (!f.ok()) return f.status();
  return model_config_from_gguf(**f);
}

TEST(ModelConfig, GgufMetadataErrors) {
  auto ok = from_gguf_bytes(llama_gguf().build());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->vocab_size, 3);
  EXPECT_EQ(ok->head_dim, 16);
  EXPECT_TRUE(ok->tie_word_embeddings);  // no output.weight
  expect_error(from_gguf_bytes(llama_gguf(1u << 30).build()), "num_layers");
  expect_error(from_gguf_bytes(llama_gguf(2, 0).build()), "num_heads");
  expect_error(from_gguf_bytes(llama_gguf(2, 3).build()), "multiple");
  testing::GgufWriter w;
  w.add_string("general.architecture", "llama");
  expect_error(from_gguf_bytes(w.build()), "llama.embedding_length");
  testing::GgufWriter bad_type = llama_gguf();
  bad_type.add_string("llama.rope.freq_base", "fast");
  expect_error(from_gguf_bytes(bad_type.build()), "llama.rope.freq_base");
  testing::GgufWriter rwkv;
  rwkv.add_string("general.architecture", "rwkv6");
  expect_error(from_gguf_bytes(rwkv.build()), "rwkv6");
  testing::GgufWriter emb = llama_gguf();  // embedding rows disagree with the vocabulary
  emb.add_tensor("token_embd.weight", DType::kF32, {64, 4}, testing::iota_bytes(64 * 4 * 4));
  expect_error(from_gguf_bytes(emb.build()), "token_embd.weight");
  testing::GgufWriter vl = llama_gguf();
  vl.add_u32("llama.attention.value_length", 8);
  expect_error(from_gguf_bytes(vl.build()), "value_length");
  testing::GgufWriter period = llama_gguf();  // a period of 0 would make every layer slide
  period.add_u32("llama.attention.sliding_window", 8);
  period.add_u32("llama.attention.sliding_window_pattern", 0);
  expect_error(from_gguf_bytes(period.build()), "sliding_window_pattern' must be >= 1");
}

// Phi-3 as llama.cpp's converter writes it: fused attn_qkv / ffn_up, longrope factors as tensors.
testing::GgufWriter phi3_gguf() {
  testing::GgufWriter w;
  w.add_string("general.architecture", "phi3");
  w.add_u32("phi3.block_count", 1);
  w.add_u32("phi3.context_length", 2048);
  w.add_u32("phi3.rope.scaling.original_context_length", 512);
  w.add_u32("phi3.embedding_length", 64);
  w.add_u32("phi3.feed_forward_length", 96);
  w.add_u32("phi3.attention.head_count", 4);
  w.add_u32("phi3.attention.head_count_kv", 2);
  w.add_u32("phi3.rope.dimension_count", 16);
  w.add_f32("phi3.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_array("tokenizer.ggml.tokens", testing::GgufWriter::string_array({"a", "b", "c"}));
  return w;
}

testing::Bytes f32_bytes(const std::vector<float>& v) {
  testing::Bytes b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(ModelConfig, Phi3GgufReadsLongropeFactorTensorsAndFusedShapes) {
  auto plain = from_gguf_bytes(phi3_gguf().build());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->architecture, "phi3");
  EXPECT_EQ(plain->rope_scaling.type, RopeScalingType::kNone);

  const std::vector<float> lo = {1, 1, 1, 1, 2, 2, 2, 2}, hi = {1, 2, 3, 4, 5, 6, 7, 8};
  testing::GgufWriter lr = phi3_gguf();
  lr.add_f32("phi3.rope.scaling.attn_factor", 1.1f);
  lr.add_tensor("rope_factors_long.weight", DType::kF32, {8}, f32_bytes(hi));
  lr.add_tensor("rope_factors_short.weight", DType::kF32, {8}, f32_bytes(lo));
  auto c = from_gguf_bytes(lr.build());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLongrope);
  EXPECT_EQ(c->rope_scaling.long_factor, std::vector<double>(hi.begin(), hi.end()));
  EXPECT_EQ(c->rope_scaling.short_factor, std::vector<double>(lo.begin(), lo.end()));
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_NEAR(c->rope_scaling.attention_factor, 1.1, 1e-6);

  testing::GgufWriter one = phi3_gguf();
  one.add_tensor("rope_factors_long.weight", DType::kF32, {8}, f32_bytes(hi));
  expect_error(from_gguf_bytes(one.build()), "rope_factors_short.weight is missing");
  testing::GgufWriter short_len = phi3_gguf();
  short_len.add_tensor("rope_factors_long.weight", DType::kF32, {4}, f32_bytes({1, 2, 3, 4}));
  short_len.add_tensor("rope_factors_short.weight", DType::kF32, {8}, f32_bytes(lo));
  expect_error(from_gguf_bytes(short_len.build()), "rope_factors_long.weight must be f32 [8]");
  testing::GgufWriter zero = phi3_gguf();
  zero.add_tensor("rope_factors_long.weight", DType::kF32, {8}, f32_bytes({1, 2, 3, 0, 5, 6, 7, 8}));
  zero.add_tensor("rope_factors_short.weight", DType::kF32, {8}, f32_bytes(lo));
  expect_error(from_gguf_bytes(zero.build()), "factor <= 0");

  // ffn_up holds gate and up rows: [2 * 96, 64]; an unfused [96, 64] disagrees with the metadata.
  testing::GgufWriter fused = phi3_gguf();
  fused.add_tensor("blk.0.ffn_up.weight", DType::kF32, {64, 192}, testing::iota_bytes(64 * 192 * 4));
  EXPECT_TRUE(from_gguf_bytes(fused.build()).ok());
  testing::GgufWriter unfused = phi3_gguf();
  unfused.add_tensor("blk.0.ffn_up.weight", DType::kF32, {64, 96}, testing::iota_bytes(64 * 96 * 4));
  expect_error(from_gguf_bytes(unfused.build()), "blk.0.ffn_up.weight");
}

TEST(ModelConfig, LoadsFromHfDirectory) {
  const std::string dir = std::filesystem::temp_directory_path() / "kvasir_cfg_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << kGemmaConfig;
  std::ofstream(dir + "/generation_config.json") << kGemmaGeneration;
  auto c = model_config_from_hf_dir(dir);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));
  std::ofstream(dir + "/generation_config.json") << "{bad";
  expect_error(model_config_from_hf_dir(dir), "generation_config.json");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(model_config_from_hf_dir(dir).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvasir
