// End to end on small random-weight models: the CUDA backend's logits follow the CPU backend's
// through prefill and several decode steps (teacher-forced with the CPU's greedy tokens, so bf16
// rounding cannot make the runs diverge), and the engine runs on the GPU with device sampling,
// reproducibly. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "setup/loaded_model.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/json.h"
#include "common/scoped_env_test_util.h"
#include "kvasir/llm.h"
#include "model/registry.h"
#include "quant/quantization_config.h"
#include "quant/quantized_weight_source.h"
#include "runner/contiguous_batch.h"

namespace kvasir {
namespace {

const char* kLlamaConfig = R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
  "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 4096,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 1024, "rope_type": "llama3"},
  "tie_word_embeddings": false, "eos_token_id": 2, "bos_token_id": 1})";

const char* kQwenConfig = R"({"model_type": "qwen2", "hidden_size": 448, "intermediate_size": 1024,
  "num_hidden_layers": 2, "num_attention_heads": 7, "num_key_value_heads": 1, "vocab_size": 640,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": true, "eos_token_id": 2, "use_sliding_window": false})";

// MoE shapes (per-expert dummy weights under HF names): many experts with few tokens each
// (decode: the GEMV path), prefill through the grouped GEMM, a shared expert behind its sigmoid
// gate (a one-expert moe_route / moe_experts), top-2 of 8 as Mixtral.
const char* kQwen3MoeConfig = R"({"model_type": "qwen3_moe", "hidden_size": 512, "intermediate_size": 1024,
  "moe_intermediate_size": 256, "num_experts": 32, "num_experts_per_tok": 4, "norm_topk_prob": true,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": 2, "num_attention_heads": 8,
  "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
  "max_position_embeddings": 4096, "tie_word_embeddings": false, "eos_token_id": 2})";

const char* kQwen2MoeConfig = R"({"model_type": "qwen2_moe", "hidden_size": 512, "intermediate_size": 1024,
  "moe_intermediate_size": 128, "shared_expert_intermediate_size": 512, "num_experts": 16,
  "num_experts_per_tok": 4, "norm_topk_prob": false, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": false,
  "eos_token_id": 2, "use_sliding_window": false})";

const char* kMixtralConfig = R"({"model_type": "mixtral", "hidden_size": 512, "intermediate_size": 768,
  "num_local_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 8,
  "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
  "max_position_embeddings": 4096, "tie_word_embeddings": false, "eos_token_id": 2, "sliding_window": null})";

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

// allowed_outliers: steps whose error may exceed the bound (still under 0.5). A MoE router picks
// from bf16 activations on the GPU and float32 ones on the CPU, so a near-tie between a token's
// k-th and (k+1)-th expert can go the other way and move that step's logits by a few percent.
// Fp8Check: the weights go through --quantization fp8 (online per-channel e4m3, dynamic per-token
// inputs) for both backends; the CPU computes W8A8 in float32, the GPU keeps FP8 codes (and must
// have kept `weights` of them). `batch` sequences decode together (above 8: the FP8 GEMM path).
struct Fp8Check {
  bool on = false;
  int batch = 3;
  double bound = 5e-2;         // per-step logits rel L2 beyond which a step is an outlier
  int min_agree_percent = 80;  // greedy tokens (teacher-forced) that must agree
  int weights = 0;
  // Both backends' KV cache (--kv-cache-dtype): the CPU's float32 and the GPU's bf16 by default,
  // or FP8 codes on both.
  DType kv_cache = DType::kBF16;
  bool calculate_kv_scales = false;  // FP8 caches: scales from the first forward on both backends
};

void compare_models(const char* config_text, int allowed_outliers = 0, const Fp8Check& fp8 = {}) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto json = parse_json(config_text);
  ASSERT_TRUE(json.ok());
  auto cfg = model_config_from_hf_json(*json, nullptr);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto weights = open_dummy_weights(dummy_weight_specs(*cfg, false), 77, "tiny");
  ASSERT_TRUE(weights.ok());
  if (fp8.on) {
    auto q = quant::online_quantization("fp8");
    ASSERT_TRUE(q.ok() && q->has_value());
    weights = quant::open_quantized_weights(std::move(*weights), **q);
    ASSERT_TRUE(weights.ok()) << weights.status().message();
  }
  CpuBackendOptions co;
  co.precision = MatmulPrecision::kExact;
  if (fp8.kv_cache != DType::kBF16) co.kv_cache_dtype = fp8.kv_cache;
  co.calculate_kv_scales = fp8.calculate_kv_scales;
  CpuBackend cpu(co);
  CudaBackendOptions go;
  go.kv_cache_dtype = fp8.kv_cache;
  go.calculate_kv_scales = fp8.calculate_kv_scales;
  auto gpu = create_cuda_backend(go);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  ModelOptions mo;
  mo.max_num_tokens = fp8.batch > 3 ? 1024 : 256;
  mo.max_num_logits = fp8.batch > 3 ? 16 : 8;
  auto mc = DecoderModel::create(*cfg, **weights, cpu, mo);
  auto mg = DecoderModel::create(*cfg, **weights, **gpu, mo);
  ASSERT_TRUE(mc.ok() && mg.ok()) << (mc.ok() ? mg.status().message() : mc.status().message());
  const int B = fp8.batch, bs = 16, max_len = 96, vocab = static_cast<int>(cfg->vocab_size);
  ContiguousBatch layout(B, max_len, bs);
  auto kc = (*mc)->allocate_kv_cache(layout.num_blocks_needed(), bs);
  auto kg = (*mg)->allocate_kv_cache(layout.num_blocks_needed(), bs);
  ASSERT_TRUE(kc.ok() && kg.ok());
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> step(B);
  for (int s = 0; s < B; ++s) {
    step[static_cast<size_t>(s)].resize(static_cast<size_t>(B > 3 ? 10 + 5 * s : 10 + 13 * s));
    for (auto& t : step[static_cast<size_t>(s)]) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  }
  ContiguousBatch bc(B, max_len, bs), bg(B, max_len, bs);
  std::vector<float> lc(static_cast<size_t>(B) * vocab), lg(lc.size());
  int agree = 0, total = 0, outliers = 0;
  for (int it = 0; it < 10; ++it) {
    ASSERT_TRUE((*mc)->forward(bc.build(step), *kc, lc.data()).ok());
    ASSERT_TRUE((*mg)->forward(bg.build(step), *kg, lg.data()).ok());
    bc.commit();
    bg.commit();
    const double err = rel_l2(lg, lc);
    if (err >= fp8.bound) {
      ++outliers;
      std::printf("step %d: logits rel L2 %.3g\n", it, err);
    }
    EXPECT_LT(err, 0.5) << "step " << it;
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
  std::printf("greedy agreement %d / %d; %s\n", agree, total, (*gpu)->stats().c_str());
  if (fp8.on) {  // every linear but lm_head stayed e4m3 on the device
    EXPECT_NE((*gpu)->stats().find("FP8 weights " + std::to_string(fp8.weights) + " "), std::string::npos);
  }
  EXPECT_LE(outliers, allowed_outliers) << "steps with logits off by the bound or more";
  EXPECT_GE(agree * 100, total * fp8.min_agree_percent);
}

TEST(CudaEndToEnd, LlamaShapedModelMatchesCpu) { compare_models(kLlamaConfig); }
TEST(CudaEndToEnd, QwenShapedModelMatchesCpu) { compare_models(kQwenConfig); }
// FP8 W8A8, stated agreement (a wrong kernel gives ~100% error and 1 in 512 greedy tokens).
// 12 sequences: prefill and decode through the FP8 GEMM, which quantizes activations as the CPU
// does, but from bf16 activations: an element near an e4m3 rounding boundary (about 1 in 30) can
// land one e4m3 step (12.5%) away from the CPU's, a percent or two per linear: 15% logits rel L2
// per step, 7 in 10 greedy tokens (teacher-forced) on these near-flat random-weight logits.
// 3 sequences: decode through the FP8 GEMV with bf16 activations, not e4m3-rounded as the CPU's
// (up to 2^-4 relative per element). Measured on the CPU (these weights, W8A8 against the same
// model with its input quantization off): 5.0-5.6% logits rel L2 per step, 28 of 30 greedy
// tokens, for both models: 12% and 7 in 10 stated here (bf16 activations add about a percent).
TEST(CudaEndToEnd, Fp8LlamaShapedModelFollowsCpuW8A8ThroughTheGemm) {
  compare_models(kLlamaConfig, 0, Fp8Check{true, 12, 0.15, 70, 3 * 7});
}
TEST(CudaEndToEnd, Fp8LlamaShapedModelFollowsCpuW8A8ThroughTheGemv) {
  compare_models(kLlamaConfig, 0, Fp8Check{true, 3, 0.12, 70, 3 * 7});
}
TEST(CudaEndToEnd, Fp8QwenShapedModelFollowsCpuW8A8ThroughTheGemv) {
  compare_models(kQwenConfig, 0, Fp8Check{true, 3, 0.12, 70, 2 * 7});
}
// An FP8 KV cache on both backends (bf16 weights): the GPU encodes keys and values from bf16
// activations, the CPU from float32 ones, so an element near an FP8 rounding boundary can take the
// neighbouring code on one side; the stated bounds are those of the FP8 W8A8 checks above.
TEST(CudaEndToEnd, LlamaShapedModelWithFp8KvCacheFollowsCpu) {
  Fp8Check c;
  c.kv_cache = DType::kF8E4M3;
  c.bound = 0.12;
  c.min_agree_percent = 70;
  compare_models(kLlamaConfig, 2, c);
  c.kv_cache = DType::kF8E5M2;
  compare_models(kQwenConfig, 2, c);
}
// --calculate-kv-scales on both backends: each layer's scales from the first forward (a prefill of
// three sequences), the GPU's from bf16 K and V, the CPU's from float32 ones (their maxima differ
// by at most a bf16 rounding), under the bounds above.
TEST(CudaEndToEnd, LlamaShapedModelWithCalculatedFp8KvScalesFollowsCpu) {
  Fp8Check c;
  c.kv_cache = DType::kF8E4M3;
  c.calculate_kv_scales = true;
  c.bound = 0.12;
  c.min_agree_percent = 70;
  compare_models(kLlamaConfig, 2, c);
}
TEST(CudaEndToEnd, Qwen3MoeShapedModelMatchesCpu) { compare_models(kQwen3MoeConfig, 3); }
TEST(CudaEndToEnd, Qwen2MoeShapedModelMatchesCpu) { compare_models(kQwen2MoeConfig, 3); }
TEST(CudaEndToEnd, MixtralShapedModelMatchesCpu) { compare_models(kMixtralConfig, 3); }

// Writes `text` to a file under the test temp dir and returns its path (a dummy-weight config).
std::string write_temp_file(const std::string& name, const char* text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(text, f);
    std::fclose(f);
  }
  return path;
}

// Runs 12 random prompts x 20 tokens through a fresh engine twice; each run's outputs go to
// outs[run] and its backend stats to stats[run]. Every output must be 20 in-vocabulary tokens.
void generate_twice(const EngineArgs& a, const SamplingParams& sp, std::vector<std::vector<int32_t>> (&outs)[2],
                    std::string (&stats)[2]) {
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
      for (int32_t t : r.outputs[0].token_ids) ASSERT_TRUE(t >= 0 && t < 512);
      outs[run].push_back(r.outputs[0].token_ids);
    }
    stats[run] = (*llm)->model().backend->stats();
    std::printf("%s\n", stats[run].c_str());
  }
}

// generate_twice with greedy sampling: 20 tokens each, EOS ignored.
void generate_greedy_twice(const EngineArgs& a, std::vector<std::vector<int32_t>> (&outs)[2], std::string (&stats)[2]) {
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  sp.temperature = 0.0f;
  generate_twice(a, sp, outs, stats);
}

EngineArgs dummy_llama_args(const std::string& config_name) {
  EngineArgs a;
  a.model = write_temp_file(config_name, kLlamaConfig);
  a.device = "cuda";
  a.load_format = "dummy";
  a.max_num_seqs = 16;
  a.max_num_batched_tokens = 64;
  a.gpu_memory_utilization = 0.1;
  return a;
}

TEST(CudaEndToEnd, EngineRunsWithDeviceSamplingReproducibly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineArgs a = dummy_llama_args("kvasir_cuda_e2e_config.json");
  a.seed = 3;
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  sp.top_p = 0.9f;
  std::vector<std::vector<int32_t>> outs[2];
  std::string stats[2];
  generate_twice(a, sp, outs, stats);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(outs[0], outs[1]);
}

// --load-format dummy --quantization fp8 through the whole engine (the H200 bench's path): FP8
// dummy weights made on the device, decode steps through the FP8 GEMV under CUDA graphs, prefill
// through the FP8 GEMM; greedy output reproducible run to run.
TEST(CudaEndToEnd, EngineRunsFp8DummyWeightsReproducibly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineArgs a = dummy_llama_args("kvasir_cuda_e2e_fp8_config.json");
  a.quantization = "fp8";
  std::vector<std::vector<int32_t>> outs[2];
  std::string stats[2];
  generate_greedy_twice(a, outs, stats);
  if (::testing::Test::HasFatalFailure()) return;
  for (const std::string& s : stats) {
    EXPECT_NE(s.find("FP8 weights 21 "), std::string::npos) << "3 layers x 7 linears kept in e4m3";
  }
  EXPECT_EQ(outs[0], outs[1]);
}

// --kv-cache-dtype fp8 through the whole engine: FP8 caches allocated for the backend's dtype,
// prefill and chunked prefill on our prefill kernel, decode steps under CUDA graphs; greedy output
// reproducible run to run.
TEST(CudaEndToEnd, EngineRunsAnFp8KvCacheReproducibly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineArgs a = dummy_llama_args("kvasir_cuda_e2e_fp8_kv_config.json");
  a.kv_cache_dtype = "fp8";
  std::vector<std::vector<int32_t>> outs[2];
  std::string stats[2];
  generate_greedy_twice(a, outs, stats);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(outs[0], outs[1]);
}

// --calculate-kv-scales through the whole engine: the first step's write reads K and V back in the
// middle of its forward (overlapped steps on), later steps run under CUDA graphs with the scales
// folded in; greedy output reproducible run to run.
TEST(CudaEndToEnd, EngineCalculatesFp8KvScalesReproducibly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineArgs a = dummy_llama_args("kvasir_cuda_e2e_fp8_kv_calc_config.json");
  a.kv_cache_dtype = "fp8";
  a.calculate_kv_scales = true;
  a.async_scheduling = true;
  std::vector<std::vector<int32_t>> outs[2];
  std::string stats[2];
  generate_greedy_twice(a, outs, stats);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(outs[0], outs[1]);
}

// Overlapped steps on the device (async scheduling's default; KVASIR_CUDA_OVERLAP_STEPS=0 turns them
// off): each step launched with the previous step's sampled ids read on the device must produce
// exactly what the loop that reads every step back first produces, seeded sampling included.
TEST(CudaEndToEnd, EngineOverlappedStepsEqualTheReadBackLoop) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineArgs a = dummy_llama_args("kvasir_cuda_e2e_overlap_config.json");
  a.seed = 5;
  a.async_scheduling = true;
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  std::vector<std::vector<int32_t>> outs[2];
  std::string stats[2];
  {
    const ScopedEnv overlapped("KVASIR_CUDA_OVERLAP_STEPS", "1");
    generate_twice(a, sp, outs, stats);  // both runs overlapped
  }
  std::vector<std::vector<int32_t>> read_back[2];
  if (!::testing::Test::HasFatalFailure()) {
    const ScopedEnv read_back_loop("KVASIR_CUDA_OVERLAP_STEPS", "0");
    generate_twice(a, sp, read_back, stats);
  }
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], read_back[0]);
}

}  // namespace
}  // namespace kvasir
