// The two default GGUF models (SmolLM2-135M Q4_1: F32/Q8_0/Q4_1; Gemma-3-270M Q4_K_M:
// F32/Q8_0/Q5_0/Q4_K/Q6_K) on the GPU with their weights kept in GGUF blocks follow the CPU
// backend's exact run: prefill (the dequantize + cuBLASLt path) and decode steps (the GGUF GEMV),
// teacher-forced with the CPU's greedy tokens, within cuda_e2e_test's bf16 tolerance (per-step
// logits rel L2 under 5e-2, at least 80% of the greedy tokens agreeing). Skips without a GPU or
// without the model files (scripts/setup.sh fetches them; $KVASIR_MODELS_DIR points elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
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
