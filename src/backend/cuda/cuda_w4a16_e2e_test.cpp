// W4A16 end to end: a small Llama-shaped model whose linears are integer weight-only checkpoints
// (GPTQ with and without act-order, AWQ GEMM, compressed-tensors pack-quantized, packed in memory
// by the test packers of quant/packed_int_test_util.h) runs on the CUDA backend with its weights
// kept int4 (the W4A16 GEMV for decode, the GEMM for prefill) and follows the CPU backend, which
// runs the checkpoint's exact dequantization, through prefill and decode steps (teacher-forced
// with the CPU's greedy tokens) within the bf16 tolerance of the plain bf16 models' test
// (cuda_e2e_test.cpp). Then --load-format dummy with a GPTQ config through the engine: int4
// weights made on the device, reproducible greedy output. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/json.h"
#include "kvasir/llm.h"
#include "loader/dummy_weights.h"
#include "model/registry.h"
#include "quant/int_quantized_weight_source.h"
#include "quant/packed_int_test_util.h"
#include "quant/quantization_config.h"
#include "runner/contiguous_batch.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

const char* kLlamaConfig = R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
  "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": false, "eos_token_id": 2, "bos_token_id": 1})";

struct Variant {
  const char* name;
  const char* quantization_config;
  quant::IntWeightLayout layout;
  int64_t group;
  bool act_order, sym;
  int zero_offset;
};

const Variant kVariants[] = {
    {"gptq g128 sym", R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false, "sym": true})",
     quant::IntWeightLayout::kGptq, 128, false, true, 1},
    {"gptq g32 act-order", R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": true, "sym": false})",
     quant::IntWeightLayout::kGptq, 32, true, false, 1},
    {"gptq per-channel v2", R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": false, "checkpoint_format": "gptq_v2"})",
     quant::IntWeightLayout::kGptq, -1, false, false, 0},
    {"awq g64", R"({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": true, "version": "gemm"})",
     quant::IntWeightLayout::kAwqGemm, 64, false, false, 0},
    {"pack-quantized g32 asym", R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
       "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
       "symmetric": false, "strategy": "group", "group_size": 32}}}, "ignore": ["lm_head"]})",
     quant::IntWeightLayout::kPackQuantized, 32, false, false, 0},
};

bool is_linear(const std::string& name, const WeightTensor& t) {
  return t.shape.size() == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
         name.find("embed_tokens") == std::string::npos && name.find("lm_head") == std::string::npos;
}

// The dummy model's tensors, every linear replaced by a random packed layer of the variant.
std::unique_ptr<quant::testing::MemoryWeightSource> packed_model(const ModelConfig& cfg, const Variant& v) {
  auto dense = open_dummy_weights(dummy_weight_specs(cfg, false), 77, "tiny");
  EXPECT_TRUE(dense.ok());
  auto src = std::make_unique<quant::testing::MemoryWeightSource>();
  uint32_t seed = 1;
  for (const std::string& name : (*dense)->tensor_names()) {
    auto t = (*dense)->tensor(name);
    EXPECT_TRUE(t.ok());
    if (!is_linear(name, *t)) {
      src->add(name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes));
      continue;
    }
    const int64_t out = t->shape[0], in = t->shape[1];
    const std::string layer = name.substr(0, name.size() - 7);
    const quant::testing::IntLayer l =
        quant::testing::random_layer(4, out, in, v.group == -1 ? in : v.group, v.act_order, seed++, v.sym);
    if (v.layout == quant::IntWeightLayout::kGptq) quant::testing::add_gptq(*src, layer, l, v.zero_offset, v.act_order);
    if (v.layout == quant::IntWeightLayout::kAwqGemm) quant::testing::add_awq(*src, layer, l);
    if (v.layout == quant::IntWeightLayout::kPackQuantized) quant::testing::add_pack_quantized(*src, layer, l, v.sym);
  }
  return src;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

class CudaW4a16EndToEnd : public ::testing::TestWithParam<Variant> {};

// Three sequences (decode: the GEMV) and then twenty (decode: the GEMM; prefill is always the
// GEMM), as cuda_e2e_test's bf16 comparison: every step's logits within 5% rel L2 and 80% of the
// greedy tokens equal.
TEST_P(CudaW4a16EndToEnd, FollowsCpuDequantization) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Variant& v = GetParam();
  auto json = parse_json(kLlamaConfig);
  ASSERT_TRUE(json.ok());
  auto cfg = model_config_from_hf_json(*json, nullptr);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto qjson = parse_json(v.quantization_config);
  ASSERT_TRUE(qjson.ok());
  auto qc = quant::parse_quantization_config(*qjson, "test");
  ASSERT_TRUE(qc.ok()) << qc.status().message();
  auto weights = quant::IntQuantizedWeightSource::wrap(packed_model(*cfg, v), *qc);
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  for (int batch : {3, 20}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    CpuBackendOptions co;
    co.precision = MatmulPrecision::kExact;
    CpuBackend cpu(co);
    auto gpu = create_cuda_backend(CudaBackendOptions{});
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    ModelOptions mo;
    mo.max_num_tokens = 1024;
    mo.max_num_logits = 32;
    auto mc = DecoderModel::create(*cfg, **weights, cpu, mo);
    auto mg = DecoderModel::create(*cfg, **weights, **gpu, mo);
    ASSERT_TRUE(mc.ok() && mg.ok()) << (mc.ok() ? mg.status().message() : mc.status().message());
    const int B = batch, bs = 16, max_len = 96, vocab = static_cast<int>(cfg->vocab_size);
    ContiguousBatch layout(B, max_len, bs);
    auto kc = (*mc)->allocate_kv_cache(layout.num_blocks_needed(), bs);
    auto kg = (*mg)->allocate_kv_cache(layout.num_blocks_needed(), bs);
    ASSERT_TRUE(kc.ok() && kg.ok());
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> step(B);
    for (int s = 0; s < B; ++s) {
      step[static_cast<size_t>(s)].resize(static_cast<size_t>(10 + 2 * s));
      for (auto& t : step[static_cast<size_t>(s)]) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    }
    ContiguousBatch bc(B, max_len, bs), bg(B, max_len, bs);
    std::vector<float> lc(static_cast<size_t>(B) * vocab), lg(lc.size());
    int agree = 0, total = 0;
    double worst = 0;
    for (int it = 0; it < 10; ++it) {
      ASSERT_TRUE((*mc)->forward(bc.build(step), *kc, lc.data()).ok());
      ASSERT_TRUE((*mg)->forward(bg.build(step), *kg, lg.data()).ok());
      bc.commit();
      bg.commit();
      const double err = rel_l2(lg, lc);
      worst = std::max(worst, err);
      EXPECT_LT(err, 5e-2) << "step " << it;
      for (int s = 0; s < B; ++s) {
        const float* rc = lc.data() + static_cast<size_t>(s) * vocab;
        const float* rg = lg.data() + static_cast<size_t>(s) * vocab;
        const int32_t tc = static_cast<int32_t>(std::max_element(rc, rc + vocab) - rc);
        const int32_t tg = static_cast<int32_t>(std::max_element(rg, rg + vocab) - rg);
        agree += tc == tg;
        ++total;
        step[static_cast<size_t>(s)] = {tc};  // teacher forcing with the CPU's token
      }
    }
    const std::string stats = (*gpu)->stats();
    std::printf("%s, batch %d: greedy agreement %d / %d, worst step's logits rel L2 %.4f; %s\n", v.name, batch, agree,
                total, worst, stats.c_str());
    EXPECT_NE(stats.find("W4A16 weights 21 "), std::string::npos) << "3 layers x 7 linears kept int4";
    EXPECT_GE(agree * 100, total * 80);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaW4a16EndToEnd, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& i) { return std::to_string(i.index); });

// --load-format dummy with a GPTQ quantization_config through the engine (the H200 bench's path):
// int4 dummy weights filled on the device, decode through the W4A16 GEMV under CUDA graphs,
// prefill through the GEMM; greedy output reproducible run to run.
TEST(CudaW4a16Engine, RunsGptqDummyWeightsReproducibly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string text(kLlamaConfig);
  text.insert(text.rfind('}'), R"(, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
      "desc_act": false, "sym": true})");
  const std::string path = ::testing::TempDir() + "/kvasir_w4a16_dummy_config.json";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  EngineArgs a;
  a.model = path;
  a.device = "cuda";
  a.load_format = "dummy";
  a.max_num_seqs = 16;
  a.max_num_batched_tokens = 64;
  a.gpu_memory_utilization = 0.1;
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  sp.temperature = 0.0f;
  std::vector<std::vector<int32_t>> outs[2];
  for (int run = 0; run < 2; ++run) {
    auto llm = LLM::create(a);
    ASSERT_TRUE(llm.ok()) << llm.status().message();
    std::vector<PromptInput> prompts(12);
    std::mt19937 rng(11);
    for (auto& p : prompts) {
      p.token_ids.resize(5 + rng() % 60);
      for (auto& t : p.token_ids) t = static_cast<int32_t>(3 + rng() % 500);
    }
    auto res = (*llm)->generate(prompts, sp);
    ASSERT_TRUE(res.ok());
    for (const auto& r : *res) {
      ASSERT_TRUE(r.error.empty()) << r.error;
      ASSERT_EQ(r.outputs[0].token_ids.size(), 20u);
      outs[run].push_back(r.outputs[0].token_ids);
    }
    const std::string stats = (*llm)->model().backend->stats();
    std::printf("%s\n", stats.c_str());
    EXPECT_NE(stats.find("W4A16 weights 21 "), std::string::npos) << "3 layers x 7 linears kept int4";
  }
  EXPECT_EQ(outs[0], outs[1]);
}

}  // namespace
}  // namespace kvasir
