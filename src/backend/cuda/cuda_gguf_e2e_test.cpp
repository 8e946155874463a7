// GGUF block weights end to end on the GPU, against the CPU backend's exact run: prefill (the
// dequantize + cuBLASLt path) and decode steps (the tensor-core GEMV), teacher-forced with the
// CPU's greedy tokens, within cuda_e2e_test's bf16 tolerance (per-step logits rel L2 under 5e-2,
// at least 80% of the greedy tokens agreeing). Two sources: small random-weight models whose
// matrices are random GGUF blocks (every kept type; no files needed), and the two default GGUF
// models (SmolLM2-135M Q4_1: F32/Q8_0/Q4_1; Gemma-3-270M Q4_K_M: F32/Q8_0/Q5_0/Q4_K/Q6_K), which
// skip without the model files (scripts/setup.sh fetches them; $KVASIR_MODELS_DIR points elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/json.h"
#include "model/registry.h"
#include "quant/block_formats.h"
#include "runner/contiguous_batch.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

// Another source's tensors, with the 2-D ones `pick` names a block type for replaced by random
// blocks of that type: random quant bytes, fp16 scales sized so the weights have mean ~0 and a
// spread of ~1/sqrt(in_features) (the dummy weights' scale, so activations stay O(1)).
class RandomBlockWeights final : public WeightSource {
 public:
  RandomBlockWeights(std::unique_ptr<WeightSource> base, const std::function<DType(const std::string&)>& pick)
      : base_(std::move(base)) {
    std::mt19937 rng(21);
    for (const std::string& name : base_->tensor_names()) {
      auto t = base_->tensor(name);
      const DType type = pick(name);
      if (!t.ok() || t->shape.size() != 2 || type == DType::kF32) continue;
      WeightTensor w = *t;
      w.dtype = type;
      auto& bytes = blocks_[name];
      bytes = random_blocks(rng, type, w.shape[0], w.shape[1]);
      w.data = bytes.data();
      w.nbytes = bytes.size();
      replaced_[name] = w;
    }
  }
  WeightFormat format() const override { return base_->format(); }
  const std::string& path() const override { return base_->path(); }
  std::vector<std::string> tensor_names() const override { return base_->tensor_names(); }
  bool has_tensor(std::string_view name) const override { return base_->has_tensor(name); }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    const auto it = replaced_.find(std::string(name));
    return it != replaced_.end() ? StatusOr<WeightTensor>(it->second) : base_->tensor(name);
  }

 private:
  static std::vector<uint8_t> random_blocks(std::mt19937& rng, DType t, int64_t rows, int64_t k) {
    const auto info = *dtype_info(t);
    const int64_t blocks = rows * k / info.block_size;
    std::vector<uint8_t> bytes(static_cast<size_t>(blocks) * info.type_size);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const float spread = 1.0f / std::sqrt(static_cast<float>(k));
    auto put = [](uint8_t* p, float v) {
      const quant::fp16_t h = quant::f32_to_fp16(v);
      std::memcpy(p, &h, 2);
    };
    for (int64_t i = 0; i < blocks; ++i) {
      uint8_t* b = bytes.data() + static_cast<size_t>(i) * info.type_size;
      // d from the spread of the quants (q - offset) d; K-quants also carry 6-bit sub-scales (mean
      // 31.5) and mins chosen so the mean weight is ~0.
      switch (t) {
        case DType::kQ4_0: put(b, spread / 4.6f); break;
        case DType::kQ5_0: put(b, spread / 9.2f); break;
        case DType::kQ8_0: put(b, spread / 73.9f); break;
        case DType::kQ4_1: put(b, spread / 4.6f), put(b + 2, -7.5f * spread / 4.6f); break;
        case DType::kQ5_1: put(b, spread / 9.2f), put(b + 2, -15.5f * spread / 9.2f); break;
        case DType::kQ4_K: put(b, spread / 200.0f), put(b + 2, 7.5f * spread / 200.0f); break;
        case DType::kQ5_K: put(b, spread / 400.0f), put(b + 2, 15.5f * spread / 400.0f); break;
        case DType::kQ6_K:
          for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(16 + rng() % 32));
          put(b + 208, spread / (18.5f * 32.0f));
          break;
        default: break;
      }
    }
    return bytes;
  }

  std::unique_ptr<WeightSource> base_;
  std::map<std::string, std::vector<uint8_t>> blocks_;
  std::map<std::string, WeightTensor> replaced_;
};

const char* kLlamaConfig = R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
  "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": false, "eos_token_id": 2, "bos_token_id": 1})";
// Tied embeddings, in_features 448 and 1024 (14 and 32 blocks of 32).
const char* kQwenConfig = R"({"model_type": "qwen2", "hidden_size": 448, "intermediate_size": 1024,
  "num_hidden_layers": 2, "num_attention_heads": 7, "num_key_value_heads": 1, "vocab_size": 640,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": true, "eos_token_id": 2, "use_sliding_window": false})";

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Q4_K_M's mix: Q6_K for v, down and lm_head, Q4_K for the other projections, Q8_0 embeddings.
DType q4_k_m_mix(const std::string& name) {
  if (has(name, "embed_tokens")) return DType::kQ8_0;
  if (has(name, "v_proj") || has(name, "down_proj") || has(name, "lm_head")) return DType::kQ6_K;
  if (has(name, "_proj")) return DType::kQ4_K;
  return DType::kF32;
}
// The legacy blocks and Q5_K (down_proj: in_features 1024; 448 is not whole super-blocks), the
// tied table Q4_0.
DType legacy_mix(const std::string& name) {
  if (has(name, "embed_tokens") || has(name, "gate_proj")) return DType::kQ4_0;
  if (has(name, "q_proj")) return DType::kQ4_1;
  if (has(name, "k_proj") || has(name, "up_proj")) return DType::kQ5_0;
  if (has(name, "v_proj")) return DType::kQ5_1;
  if (has(name, "o_proj")) return DType::kQ8_0;
  if (has(name, "down_proj")) return DType::kQ5_K;
  return DType::kF32;
}

// Teacher-forced decode of `batch` random prompts on both backends; the GPU must have kept
// `blocks` matrices in GGUF blocks.
void random_block_model_follows_cpu(const char* config_text, DType (*pick)(const std::string&), int batch,
                                    int blocks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto json = parse_json(config_text);
  ASSERT_TRUE(json.ok());
  auto cfg = model_config_from_hf_json(*json, nullptr);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto dummy = open_dummy_weights(dummy_weight_specs(*cfg, false), 77, "tiny");
  ASSERT_TRUE(dummy.ok());
  RandomBlockWeights weights(std::move(*dummy), pick);
  CpuBackendOptions co;
  co.precision = MatmulPrecision::kExact;
  CpuBackend cpu(co);
  auto gpu = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  ModelOptions mo;
  mo.max_num_tokens = 1024;
  mo.max_num_logits = 32;
  auto mc = DecoderModel::create(*cfg, weights, cpu, mo);
  auto mg = DecoderModel::create(*cfg, weights, **gpu, mo);
  ASSERT_TRUE(mc.ok() && mg.ok()) << (mc.ok() ? mg.status().message() : mc.status().message());
  const int B = batch, bs = 16, max_len = 96, vocab = static_cast<int>(cfg->vocab_size);
  ContiguousBatch bc(B, max_len, bs), bg(B, max_len, bs);
  auto kc = (*mc)->allocate_kv_cache(bc.num_blocks_needed(), bs);
  auto kg = (*mg)->allocate_kv_cache(bg.num_blocks_needed(), bs);
  ASSERT_TRUE(kc.ok() && kg.ok());
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> step(B);
  for (int s = 0; s < B; ++s) {
    step[static_cast<size_t>(s)].resize(static_cast<size_t>(5 + 3 * s));
    for (auto& t : step[static_cast<size_t>(s)]) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  }
  std::vector<float> lc(static_cast<size_t>(B) * vocab), lg(lc.size());
  int agree = 0, total = 0, outliers = 0;
  for (int it = 0; it < 10; ++it) {
    ASSERT_TRUE((*mc)->forward(bc.build(step), *kc, lc.data()).ok());
    ASSERT_TRUE((*mg)->forward(bg.build(step), *kg, lg.data()).ok());
    bc.commit();
    bg.commit();
    const double err = rel_l2(lg.data(), lc.data(), lc.size());
    if (err >= 5e-2) {
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
  const std::string stats = (*gpu)->stats();
  std::printf("greedy agreement %d / %d; %s\n", agree, total, stats.c_str());
  EXPECT_NE(stats.find("GGUF block weights " + std::to_string(blocks) + " "), std::string::npos) << stats;
  EXPECT_EQ(outliers, 0) << "steps with logits off by 5e-2 or more";
  EXPECT_GE(agree * 100, total * 80);
}

// 3 layers x 7 projections + embeddings + lm_head in Q4_K_M's mix; 3 sequences decode through the
// GEMV (one pass), 20 through its two passes (16 + 4 tokens).
TEST(CudaGgufEndToEnd, RandomQ4KMBlocksFollowTheCpu) { random_block_model_follows_cpu(kLlamaConfig, q4_k_m_mix, 3, 23); }
TEST(CudaGgufEndToEnd, RandomQ4KMBlocksFollowTheCpuBatch20) {
  random_block_model_follows_cpu(kLlamaConfig, q4_k_m_mix, 20, 23);
}
// Q4_0 (tied table: embedding and lm_head), Q4_1, Q5_0, Q5_1, Q8_0 and Q5_K (2 layers x 7 + 1).
TEST(CudaGgufEndToEnd, RandomLegacyBlocksFollowTheCpu) { random_block_model_follows_cpu(kQwenConfig, legacy_mix, 3, 15); }

std::unique_ptr<LoadedModel> load(const std::string& path, const char* device) {
  LoadOptions lo;
  lo.device = device;
  lo.exact_matmul = true;
  lo.model.max_num_tokens = 256;
  lo.model.max_num_logits = 8;
  auto m = load_model(path, lo);
  EXPECT_TRUE(m.ok()) << device << ": " << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

void follows_cpu(const char* rel_path) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // $KVASIR_MODELS_DIR (a machine the binary was carried to), else the source tree's models/.
  const char* dir = std::getenv("KVASIR_MODELS_DIR");
  const std::string path = dir != nullptr ? std::string(dir) + "/" + std::filesystem::path(rel_path).filename().string()
                                          : std::string(KVASIR_SOURCE_DIR) + "/" + rel_path;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing: run scripts/setup.sh";
  auto cpu = load(path, "cpu");
  auto gpu = load(path, "cuda");
  ASSERT_TRUE(cpu && gpu);
  const std::string stats = gpu->backend->stats();
  EXPECT_NE(stats.find("GGUF block weights"), std::string::npos) << "the GPU kept no weight in GGUF blocks: " << stats;
  const char* texts[] = {"The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number",
                         "Once upon a time, in a small village by the sea, there lived an old fisherman who"};
  const int B = 3, bs = 16, max_len = 96;
  std::vector<std::vector<int32_t>> step(B);
  for (int s = 0; s < B; ++s) step[static_cast<size_t>(s)] = cpu->tokenizer->encode(texts[s], true);
  const int vocab = static_cast<int>(cpu->config.vocab_size);
  ContiguousBatch bc(B, max_len, bs), bg(B, max_len, bs);
  auto kc = cpu->model->allocate_kv_cache(bc.num_blocks_needed(), bs);
  auto kg = gpu->model->allocate_kv_cache(bg.num_blocks_needed(), bs);
  ASSERT_TRUE(kc.ok() && kg.ok());
  std::vector<float> lc(static_cast<size_t>(B) * vocab), lg(lc.size());
  int agree = 0, total = 0, outliers = 0;
  double worst = 0;
  for (int it = 0; it < 16; ++it) {
    ASSERT_TRUE(cpu->model->forward(bc.build(step), *kc, lc.data()).ok());
    ASSERT_TRUE(gpu->model->forward(bg.build(step), *kg, lg.data()).ok());
    bc.commit();
    bg.commit();
    for (int s = 0; s < B; ++s) {
      const float* rc = lc.data() + static_cast<size_t>(s) * vocab;
      const float* rg = lg.data() + static_cast<size_t>(s) * vocab;
      const double err = rel_l2(rg, rc, static_cast<size_t>(vocab));
      worst = std::max(worst, err);
      if (err >= 5e-2) {
        ++outliers;
        std::printf("step %d sequence %d: logits rel L2 %.3g\n", it, s, err);
      }
      EXPECT_LT(err, 0.5) << "step " << it << " sequence " << s;
      const int32_t tc = static_cast<int32_t>(std::max_element(rc, rc + vocab) - rc);
      const int32_t tg = static_cast<int32_t>(std::max_element(rg, rg + vocab) - rg);
      agree += tc == tg;
      ++total;
      step[static_cast<size_t>(s)] = {tc};  // teacher forcing with the CPU's token
    }
  }
  std::printf("%s: greedy agreement %d / %d, worst logits rel L2 %.3g; %s\n", rel_path, agree, total, worst,
              stats.c_str());
  EXPECT_EQ(outliers, 0) << "rows with logits off by 5e-2 or more";
  EXPECT_GE(agree * 100, total * 80);
}

TEST(CudaGgufEndToEnd, SmolLm2Q4_1FollowsTheCpu) { follows_cpu("models/SmolLM2-135M-Instruct.Q4_1.gguf"); }
TEST(CudaGgufEndToEnd, Gemma3Q4_K_MFollowsTheCpu) { follows_cpu("models/gemma-3-270m-q4_k_m.gguf"); }

}  // namespace
}  // namespace kvasir
