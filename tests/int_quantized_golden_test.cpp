// Accuracy of integer weight-only checkpoints (GPTQ, AWQ GEMM, compressed-tensors pack-quantized) of
// SmolLM2 on the CPU against HF transformers running the same dequantized weights in float32: logit
// rows of the golden prompts (relative L2 < 1e-2), top-1 at every prompt position, and greedy 64-token
// continuations through the engine (at least 18 of 20 agree). The checkpoints are written by
// scripts/make_int_quantized_checkpoints.py into models/quantized-int/ (scripts/test.sh runs it), the
// golden data by the same script's --golden into tests/data/golden/smollm2_<variant>/.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/json.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "runner/contiguous_batch.h"
#include "setup/loaded_model.h"

namespace kvasir::testing {
namespace {

class IntQuantizedGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = repo_path(std::string("models/quantized-int/") + GetParam());
    if (!file_exists(path_ + "/model.safetensors")) {
      GTEST_SKIP() << path_ << " missing: run scripts/make_int_quantized_checkpoints.py";
    }
    auto g = load_golden(std::string("smollm2_") + GetParam());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    golden_ = std::move(*g);
  }
  std::string path_;
  Golden golden_;
};

TEST_P(IntQuantizedGoldenTest, LogitsMatchTransformersOnTheDequantizedWeights) {
  int longest = 0;
  for (const auto& p : golden_.prompts) longest = std::max(longest, static_cast<int>(p.token_ids.size()));
  LoadOptions lo;
  lo.exact_matmul = true;
  lo.model.max_num_tokens = longest;
  lo.model.max_num_logits = longest;
  auto m = load_model(path_, lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->config.vocab_size, golden_.vocab_size);
  const size_t V = static_cast<size_t>(golden_.vocab_size);
  std::vector<float> logits(static_cast<size_t>(longest) * V);
  double worst_l2 = 0;
  int num_rows = 0, num_positions = 0, num_flips = 0;
  for (const auto& p : golden_.prompts) {
    const int n = static_cast<int>(p.token_ids.size());
    ContiguousBatch cb(1, n, 16);
    auto cache = (*m)->model->allocate_kv_cache(cb.num_blocks_needed(), 16);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE((*m)->model->run_layers(cb.build({p.token_ids}), *cache).ok());
    std::vector<int32_t> idx(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
    ASSERT_TRUE((*m)->model->compute_logits(idx.data(), n, logits.data()).ok());
    for (int pos = 0; pos < n; ++pos) {
      const float* row = logits.data() + static_cast<size_t>(pos) * V;
      const int top = static_cast<int>(std::max_element(row, row + V) - row);
      ++num_positions;
      if (top != p.top1[static_cast<size_t>(pos)]) {
        ++num_flips;  // only a near tie in the reference may flip
        EXPECT_LT(p.margin[static_cast<size_t>(pos)], 1e-3) << p.id << " position " << pos;
      }
      auto it = std::find(p.logits_positions.begin(), p.logits_positions.end(), pos);
      if (it == p.logits_positions.end()) continue;
      const double e = rel_l2(row, p.logits.data() + static_cast<size_t>(it - p.logits_positions.begin()) * V, V);
      worst_l2 = std::max(worst_l2, e);
      ++num_rows;
      EXPECT_LT(e, 1e-2) << p.id << " position " << pos;
    }
  }
  EXPECT_GE(num_rows, 1);
  std::printf("[ metrics ] %s: %d positions, %d top-1 flips, %d full rows, worst relative L2 %.3g\n", GetParam(),
              num_positions, num_flips, num_rows, worst_l2);
}

TEST_P(IntQuantizedGoldenTest, GreedyContinuationsAgreeWithTransformers) {
  EngineArgs ea;
  ea.model = path_;
  ea.kv_cache_memory = int64_t{256} << 20;
  ea.max_num_seqs = 32;
  auto llm = LLM::create(ea);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  std::vector<PromptInput> prompts;
  for (const auto& p : golden_.prompts) prompts.push_back(PromptInput{"", p.token_ids, std::nullopt});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = static_cast<int>(golden_.prompts[0].generated.size());
  sp.ignore_eos = true;
  auto res = (*llm)->generate(prompts, sp);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  int agree = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE((*res)[i].error.empty()) << (*res)[i].error;
    const auto& got = (*res)[i].outputs[0].token_ids;
    if (got == golden_.prompts[i].generated) {
      ++agree;
      continue;
    }
    size_t first = 0;
    while (first < got.size() && got[first] == golden_.prompts[i].generated[first]) ++first;
    std::printf("[ info    ] %s: continuation of %s diverges at token %zu\n", GetParam(), golden_.prompts[i].id.c_str(), first);
  }
  std::printf("[ metrics ] %s: %d of %zu greedy continuations agree with transformers\n", GetParam(), agree, prompts.size());
  EXPECT_EQ(prompts.size(), 20u);
  EXPECT_GE(agree, 18);
}

// The checkpoint of `variant` with its config.json's quantization_config edited by `edit`, in a fresh
// directory (the other files symlinked): what load_model says about it.
Status load_with_edited_config(const std::string& variant, const std::function<void(Json&)>& edit) {
  const std::string src = repo_path("models/quantized-int/" + variant);
  char tmpl[] = "/tmp/kvasir_int_quant_XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (dir == nullptr) return internal_error("mkdtemp failed");
  for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json"}) {
    if (file_exists(src + "/" + f) && ::symlink((src + "/" + f).c_str(), (std::string(dir) + "/" + f).c_str()) != 0) {
      return internal_error("symlink failed");
    }
  }
  std::ifstream in(src + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  auto config = parse_json(text.str());
  if (!config.ok()) return config.status();
  edit(*config->find("quantization_config"));
  std::ofstream(std::string(dir) + "/config.json") << config->dump();
  LoadOptions lo;
  auto m = load_model(dir, lo);
  std::filesystem::remove_all(dir);
  return m.ok() ? Status() : m.status();
}

TEST(IntQuantizedCheckpoint, AConfigThatDisagreesWithTheTensorsIsRefusedAtLoadNamingThem) {
  if (!file_exists(repo_path("models/quantized-int/gptq_w4_g32_act/model.safetensors"))) {
    GTEST_SKIP() << "run scripts/make_int_quantized_checkpoints.py";
  }
  Status group = load_with_edited_config("gptq_w4_g32_act", [](Json& q) { q.set("group_size", Json(int64_t{64})); });
  // The first packed layer is layer 0's down_proj: 1536 input columns, 48 groups of 32.
  EXPECT_NE(group.message().find("down_proj.scales has shape [48, 576], expected [24, 576]"), std::string::npos)
      << group.message();
  Status bits = load_with_edited_config("gptq_w4_g32_act", [](Json& q) { q.set("bits", Json(int64_t{8})); });
  // Read as 8-bit, qweight holds 768 input columns: 24 groups.
  EXPECT_NE(bits.message().find("down_proj.scales has shape [48, 576], expected [24, 576]"), std::string::npos)
      << bits.message();
  Status three = load_with_edited_config("gptq_w4_g32_act", [](Json& q) { q.set("bits", Json(int64_t{3})); });
  EXPECT_NE(three.message().find("'bits' is 3; GPTQ weights of 4 or 8 bits are supported"), std::string::npos)
      << three.message();
  Status act = load_with_edited_config("gptq_w4_g32_act", [](Json& q) { q.set("desc_act", Json(false)); });
  EXPECT_NE(act.message().find(".g_idx: column"), std::string::npos) << act.message();
  Status method = load_with_edited_config("gptq_w4_g32_act", [](Json& q) { q.set("quant_method", Json("bitsandbytes")); });
  EXPECT_NE(method.message().find("quant_method 'bitsandbytes' is not supported"), std::string::npos) << method.message();
}

// Each layout and each way the CPU runs it: GPTQ 4-bit asymmetric act-order (v1 zeros; float32),
// AWQ (asymmetric: Q8_0 blocks), compressed-tensors W4A16 symmetric with bf16 scales (Q4_0 blocks).
// The script's other variants are checked by its reference unpacker and GPTQModel's / compressed-
// tensors' code; every layout and option is unit-tested in quant_int_test.
INSTANTIATE_TEST_SUITE_P(Variants, IntQuantizedGoldenTest,
                         ::testing::Values("gptq_w4_g32_act", "awq_w4_g64", "ct_w4a16_g64"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kvasir::testing
