// The gpt_oss family's config: transformers' GptOssConfig defaults for what a config.json leaves
// out, the YaRN fields it reads, the expert counts and SwiGLU constants it checks, and the MXFP4
// checkpoints it refuses (HF quantization_config, GGUF tensor type) with a message naming MXFP4.
// Its numerics are checked against transformers by tiny_model_golden_test (one prefill of every
// prompt); here the same tiny model decodes a prompt token by token and in chunks, so the decode
// and chunked paths of its attention (sinks, window) and MoE meet transformers' logits too.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/mapped_file.h"
#include "loader/gguf_file.h"
#include "loader/test_writers.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"
#include "model/tiny_config_test_util.h"

namespace kvasir {
namespace {

using test_util::parse_json_or_fail;
using test_util::tiny_config;

TEST(GptOssConfig, ConfigJsonDefaultsAreGptOssConfigs) {
  Json j = tiny_config("gpt_oss");
  // Without the window and the expert numbers the tests' tiny config sets for every MoE family.
  std::erase_if(j.as_object(), [](const auto& kv) {
    return kv.first == "sliding_window" || kv.first == "num_experts" || kv.first == "num_local_experts" ||
           kv.first == "num_experts_per_tok";
  });
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

// Tokens [begin, end) of one sequence whose earlier tokens are already in the cache (blocks 0, 1,
// ... of 16 slots); logits at every one of them.
struct Chunk {
  Chunk(const std::vector<int32_t>& prompt, int begin, int end) {
    for (int p = begin; p < end; ++p) {
      ids.push_back(prompt[static_cast<size_t>(p)]);
      positions.push_back(p);
      slots.push_back(p);
      rows.push_back(p - begin);
    }
    for (int b = 0; b * 16 < static_cast<int>(prompt.size()); ++b) blocks.push_back(b);
    qsl = {0, end - begin};
    seq_lens = {end};
    fb.num_tokens = end - begin;
    fb.input_ids = ids.data();
    fb.positions = positions.data();
    fb.attn.num_seqs = 1;
    fb.attn.num_tokens = fb.num_tokens;
    fb.attn.query_start_loc = qsl.data();
    fb.attn.seq_lens = seq_lens.data();
    fb.attn.block_tables = blocks.data();
    fb.attn.max_blocks_per_seq = static_cast<int>(blocks.size());
    fb.attn.slot_mapping = slots.data();
    fb.attn.block_size = 16;
    fb.num_logits = fb.num_tokens;
    fb.logits_indices = rows.data();
  }
  std::vector<int32_t> ids, positions, qsl, seq_lens, blocks, rows;
  std::vector<int64_t> slots;
  ForwardBatch fb;
};

TEST(GptOssTinyModel, DecodeAndChunkedPrefillMatchTransformers) {
  const std::string dir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/gpt_oss";
  auto text = read_text_file(dir + "/golden.json", 1u << 20);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const Json golden = parse_json_or_fail(*text);
  const Json& prompt_json = golden.find("prompts")->as_array()[1];  // 24 tokens: two KV blocks
  std::vector<int32_t> prompt;
  for (const Json& id : prompt_json.find("ids")->as_array()) prompt.push_back(static_cast<int32_t>(id.as_int()));
  const int64_t vocab = golden.find("vocab_size")->as_int();
  const int n = static_cast<int>(prompt.size());
  std::vector<float> want(static_cast<size_t>(n * vocab));
  std::ifstream f(dir + "/" + prompt_json.find("logits")->as_string(), std::ios::binary);
  f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
  ASSERT_TRUE(f.good());

  for (const std::string& path : {dir, dir + "/model.gguf"}) {
    SCOPED_TRACE(path);
    auto weights = open_weights(path);
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    auto config = load_model_config(**weights);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    CpuBackend backend(CpuBackendOptions{.num_threads = 2, .precision = MatmulPrecision::kExact});
    ModelOptions mo;
    mo.max_num_tokens = n;
    mo.max_num_logits = n;
    auto model = DecoderModel::create(*config, **weights, backend, mo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    // Token by token (every step a decode), then a chunked prefill of 5 + 11 + 8 tokens.
    std::vector<std::vector<int>> plans = {{}, {0, 5, 16, n}};
    for (int p = 0; p <= n; ++p) plans[0].push_back(p);
    for (const std::vector<int>& cuts : plans) {
      auto cache = (*model)->allocate_kv_cache(2, 16);
      ASSERT_TRUE(cache.ok());
      std::vector<float> got(want.size());
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        Chunk chunk(prompt, cuts[c], cuts[c + 1]);
        ASSERT_TRUE((*model)->forward(chunk.fb, *cache, got.data() + cuts[c] * vocab).ok());
      }
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
        den += double{want[i]} * want[i];
      }
      EXPECT_LT(std::sqrt(num / den), 1e-4) << cuts.size() - 1 << " steps";
    }
  }
}

}  // namespace
}  // namespace kvasir
