// The tiny DeepSeek models of tests/data/tiny/deepseek_* (scripts/gen_tiny_models.py: MLA with
// q_lora or a plain q_proj, YaRN, both RoPE pairings; dense layers; token ids, no tokenizer) on
// the CUDA backend, from the HF directory (kv_b_proj) and from llama.cpp's GGUF conversion: the
// prefill logits at every position follow the CPU backend's and transformers' float32 logits,
// twelve decode steps follow the CPU's (teacher-forced with the CPU's greedy tokens, so bf16
// rounding cannot make the runs diverge), and a prompt prefilled in chunks gives the logits of the
// whole prompt (bf16 bounds: relative L2 5e-2, as cuda_e2e_test). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"
#include "runner/contiguous_batch.h"

namespace kvasir {
namespace {

const std::string kTinyDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny";

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

struct Golden {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> logits;  // [len, vocab] per prompt, transformers float32
};

Golden read_golden(const std::string& dir, int vocab) {
  Golden g;
  auto text = read_text_file(dir + "/golden.json", 1u << 20);
  EXPECT_TRUE(text.ok()) << dir;
  if (!text.ok()) return g;
  auto j = parse_json(*text);
  EXPECT_TRUE(j.ok()) << dir;
  if (!j.ok()) return g;
  for (const Json& p : j->find("prompts")->as_array()) {
    std::vector<int32_t> ids;
    for (const Json& id : p.find("ids")->as_array()) ids.push_back(static_cast<int32_t>(id.as_int()));
    std::vector<float> l(ids.size() * static_cast<size_t>(vocab));
    std::ifstream f(dir + "/" + p.find("logits")->as_string(), std::ios::binary);
    f.read(reinterpret_cast<char*>(l.data()), static_cast<std::streamsize>(l.size() * sizeof(float)));
    EXPECT_TRUE(f.good()) << dir << ": short logits file";
    g.prompts.push_back(std::move(ids));
    g.logits.push_back(std::move(l));
  }
  return g;
}

void compare_on_gpu(const std::string& dir, const std::string& path) {
  SCOPED_TRACE(path);
  auto weights = open_weights(path);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  auto cfg = load_model_config(**weights);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const int vocab = static_cast<int>(cfg->vocab_size);
  const Golden g = read_golden(dir, vocab);
  ASSERT_FALSE(g.prompts.empty());
  CpuBackendOptions co;
  co.precision = MatmulPrecision::kExact;
  CpuBackend cpu(co);
  auto gpu = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  ModelOptions mo;
  mo.max_num_tokens = 256;
  mo.max_num_logits = 64;
  auto mc = DecoderModel::create(*cfg, **weights, cpu, mo);
  auto mg = DecoderModel::create(*cfg, **weights, **gpu, mo);
  ASSERT_TRUE(mc.ok() && mg.ok()) << (mc.ok() ? mg.status().message() : mc.status().message());
  const int B = static_cast<int>(g.prompts.size()), bs = 16, max_len = 48;
  ContiguousBatch bc(B, max_len, bs), bg(B, max_len, bs);
  auto kc = (*mc)->allocate_kv_cache(bc.num_blocks_needed(), bs);
  auto kg = (*mg)->allocate_kv_cache(bg.num_blocks_needed(), bs);
  ASSERT_TRUE(kc.ok() && kg.ok());

  // Prefill of every prompt in one step, logits at every position.
  size_t total = 0;
  for (const auto& p : g.prompts) total += p.size();
  ASSERT_LE(total, 64u);
  std::vector<float> lc(total * static_cast<size_t>(vocab)), lg(lc.size());
  ASSERT_TRUE((*mc)->forward(bc.build(g.prompts, true), *kc, lc.data()).ok());
  ASSERT_TRUE((*mg)->forward(bg.build(g.prompts, true), *kg, lg.data()).ok());
  bc.commit();
  bg.commit();
  EXPECT_LT(rel_l2(lg.data(), lc.data(), lc.size()), 5e-2) << "prefill logits vs CPU";
  int top1 = 0, positions = 0;
  size_t row = 0;
  std::vector<std::vector<int32_t>> step(static_cast<size_t>(B));
  for (int s = 0; s < B; ++s) {
    const size_t len = g.prompts[static_cast<size_t>(s)].size();
    const float* got = lg.data() + row * static_cast<size_t>(vocab);
    EXPECT_LT(rel_l2(got, g.logits[static_cast<size_t>(s)].data(), len * static_cast<size_t>(vocab)), 5e-2)
        << "prompt " << s << " vs transformers";
    for (size_t i = 0; i < len; ++i) {
      top1 += argmax(got + i * vocab, vocab) == argmax(g.logits[static_cast<size_t>(s)].data() + i * vocab, vocab);
      ++positions;
    }
    step[static_cast<size_t>(s)] = {argmax(lc.data() + (row + len - 1) * static_cast<size_t>(vocab), vocab)};
    row += len;
  }
  std::printf("[ metrics ] %s: prefill top-1 agreement with transformers %d / %d\n", path.c_str(), top1, positions);
  EXPECT_GE(top1 * 20, positions * 17);  // bf16 weights may flip near-ties; a wrong op agrees ~1/256

  // Decode steps (graphs from the second sighting of a shape), teacher-forced with the CPU's tokens.
  std::vector<float> dc(static_cast<size_t>(B) * vocab), dg(dc.size());
  int agree = 0, steps = 0, far_steps = 0;
  for (int it = 0; it < 12; ++it) {
    ASSERT_TRUE((*mc)->forward(bc.build(step), *kc, dc.data()).ok());
    ASSERT_TRUE((*mg)->forward(bg.build(step), *kg, dg.data()).ok());
    bc.commit();
    bg.commit();
    // The tiny models' MoE layers route by near-tied scores at times: bf16 activations may pick
    // another expert for a token, which moves that step's logits far (seen: 0.59 on deepseek_v3's
    // sigmoid router), while a wrong op moves every step. So a step may be far now and then, as
    // cuda_e2e_test allows for the MoE-shaped models; the greedy agreement below still holds.
    const double err = rel_l2(dg.data(), dc.data(), dc.size());
    if (err >= 5e-2) {
      ++far_steps;
      std::printf("[ metrics ] %s: decode step %d logits vs CPU %.3g\n", path.c_str(), it, err);
    }
    for (int s = 0; s < B; ++s) {
      const int tc = argmax(dc.data() + static_cast<size_t>(s) * vocab, vocab);
      agree += tc == argmax(dg.data() + static_cast<size_t>(s) * vocab, vocab);
      ++steps;
      step[static_cast<size_t>(s)] = {tc};
    }
  }
  std::printf("[ metrics ] %s: decode greedy agreement %d / %d; %s\n", path.c_str(), agree, steps,
              (*gpu)->stats().c_str());
  EXPECT_GE(agree * 10, steps * 8);
  EXPECT_LE(far_steps, 2) << "decode steps whose logits are 5e-2 or more from the CPU's";

  // The longest prompt again, prefilled in three chunks on a fresh cache: the whole prompt's logits.
  size_t longest = 0, at = 0, offset = 0;
  for (size_t s = 0; s < g.prompts.size(); ++s) {
    if (g.prompts[s].size() > g.prompts[longest].size()) longest = s;
  }
  for (size_t s = 0; s < longest; ++s) offset += g.prompts[s].size();
  const std::vector<int32_t>& p = g.prompts[longest];
  ASSERT_GE(p.size(), 17u);
  ContiguousBatch chunked(1, max_len, bs);
  auto kg2 = (*mg)->allocate_kv_cache(chunked.num_blocks_needed(), bs);
  ASSERT_TRUE(kg2.ok());
  std::vector<float> lchunk(p.size() * static_cast<size_t>(vocab));
  const size_t cuts[] = {5, 11, p.size() - 16};
  for (size_t c : cuts) {
    ASSERT_LE(at + c, p.size());
    std::vector<std::vector<int32_t>> chunk = {std::vector<int32_t>(p.begin() + static_cast<long>(at), p.begin() + static_cast<long>(at + c))};
    ASSERT_TRUE((*mg)->forward(chunked.build(chunk, true), *kg2, lchunk.data() + at * static_cast<size_t>(vocab)).ok());
    chunked.commit();
    at += c;
  }
  ASSERT_EQ(at, p.size());
  EXPECT_LT(rel_l2(lchunk.data(), lc.data() + offset * static_cast<size_t>(vocab), lchunk.size()), 5e-2)
      << "chunked prefill vs the CPU's whole prompt";
}

TEST(CudaMlaEndToEnd, TinyDeepSeekModelsMatchCpuAndTransformers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  int models = 0;
  for (const char* name : {"deepseek_v2", "deepseek_v2_lite", "deepseek_v3"}) {
    const std::string dir = kTinyDir + "/" + name;
    if (!std::filesystem::is_directory(dir)) continue;
    compare_on_gpu(dir, dir);
    if (std::filesystem::exists(dir + "/model.gguf")) compare_on_gpu(dir, dir + "/model.gguf");
    ++models;
  }
  EXPECT_EQ(models, 3) << "tiny DeepSeek models missing under " << kTinyDir;
}

}  // namespace
}  // namespace kvasir
