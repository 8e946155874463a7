// Accuracy of the CPU forward pass against HF transformers (float32, same dequantized weights):
// logits at every position of the golden prompts, for SmolLM2 and Gemma 3, from the GGUF file and
// from the converted HF directory; greedy continuations of the exact and the fast path; and
// batch invariance (several sequences of mixed lengths in one forward == one at a time).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "setup/loaded_model.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "runner/contiguous_batch.h"

namespace kvasir::testing {
namespace {

struct ModelCase {
  const char* golden;
  const char* path;  // relative to the repo
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.path; }

class ModelGoldenTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    path_ = repo_path(GetParam().path);
    if (!file_exists(path_)) GTEST_SKIP() << path_ << " missing: run scripts/setup.sh";
    auto g = load_golden(GetParam().golden);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    golden_ = std::move(*g);
  }
  std::unique_ptr<LoadedModel> load(bool exact, int max_tokens, int max_logits, const char* kv_dtype = "auto",
                                    bool calculate_kv_scales = false) {
    LoadOptions lo;
    lo.exact_matmul = exact;
    lo.kv_cache_dtype = kv_dtype;
    lo.calculate_kv_scales = calculate_kv_scales;
    lo.model.max_num_tokens = max_tokens;
    lo.model.max_num_logits = max_logits;
    auto m = load_model(path_, lo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::string path_;
  Golden golden_;
};

TEST_P(ModelGoldenTest, ExactLogitsMatchTransformersAtEveryPosition) {
  int longest = 0;
  for (const auto& p : golden_.prompts) longest = std::max(longest, static_cast<int>(p.token_ids.size()));
  constexpr int kChunk = 64;
  auto m = load(/*exact=*/true, longest, kChunk);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->config.vocab_size, golden_.vocab_size);
  const size_t V = static_cast<size_t>(golden_.vocab_size);
  std::vector<float> logits(kChunk * V);
  double worst_l2 = 0;
  int num_full_rows = 0, num_positions = 0, num_ties = 0;
  for (const auto& p : golden_.prompts) {
    const int n = static_cast<int>(p.token_ids.size());
    ContiguousBatch cb(1, n, 16);
    auto cache = m->model->allocate_kv_cache(cb.num_blocks_needed(), 16);
    ASSERT_TRUE(cache.ok());
    const ForwardBatch& fb = cb.build({p.token_ids});
    ASSERT_TRUE(m->model->run_layers(fb, *cache).ok());
    for (int b = 0; b < n; b += kChunk) {
      const int rows = std::min(kChunk, n - b);
      std::vector<int32_t> idx(static_cast<size_t>(rows));
      for (int i = 0; i < rows; ++i) idx[static_cast<size_t>(i)] = b + i;
      ASSERT_TRUE(m->model->compute_logits(idx.data(), rows, logits.data()).ok());
      for (int i = 0; i < rows; ++i) {
        const int pos = b + i;
        const float* row = logits.data() + static_cast<size_t>(i) * V;
        const int top = static_cast<int>(std::max_element(row, row + V) - row);
        ++num_positions;
        if (top != p.top1[static_cast<size_t>(pos)]) {
          // Only an exact tie in the reference (margin ~ float rounding) may flip.
          ++num_ties;
          EXPECT_LT(p.margin[static_cast<size_t>(pos)], 1e-4) << p.id << " position " << pos << ": top-1 " << top
                                                              << " vs reference " << p.top1[static_cast<size_t>(pos)];
        }
        auto it = std::find(p.logits_positions.begin(), p.logits_positions.end(), pos);
        if (it != p.logits_positions.end()) {
          const size_t k = static_cast<size_t>(it - p.logits_positions.begin());
          const double e = rel_l2(row, p.logits.data() + k * V, V);
          worst_l2 = std::max(worst_l2, e);
          ++num_full_rows;
          EXPECT_LT(e, 1e-3) << p.id << " position " << pos;
        }
      }
    }
  }
  EXPECT_GE(num_full_rows, 10);
  std::printf("[ metrics ] %s: %d positions, top-1 ties %d, %d full rows, worst relative L2 %.3g\n", GetParam().path,
              num_positions, num_ties, num_full_rows, worst_l2);
}

// Greedy 64-token continuations (EOS ignored, as the reference generated them) through the whole
// engine. Both the float32-activation path and the default fast path (16-bit activations, see
// backend/cpu/quant/matmul.h) must agree on >= 19 of 20 prompts. (HF directories hold float32
// weights, which take the float32 kernels in both modes.)
// A reference step whose top-1 and top-2 logits are this close is a near tie: float32 summation
// order alone can flip it, so a lossy path diverging there says nothing about its accuracy.
constexpr double kNearTieMargin = 0.01;

// Returns the continuations equal to the reference's; *diverged_at_near_tie (if given) counts the
// others whose first differing token is at a reference near tie (kNearTieMargin).
int count_agreeing_continuations(const std::string& path, const Golden& golden, bool exact,
                                 const char* kv_dtype = "auto", const char* dtype = "auto",
                                 int* diverged_at_near_tie = nullptr) {
  EngineArgs ea;
  ea.model = path;
  ea.kv_cache_memory = int64_t{512} << 20;
  ea.max_num_seqs = 32;
  ea.exact_matmul = exact;
  ea.kv_cache_dtype = kv_dtype;
  ea.dtype = dtype;
  auto llm = LLM::create(ea);
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  if (!llm.ok()) return 0;
  std::vector<PromptInput> prompts;
  for (const auto& p : golden.prompts) prompts.push_back(PromptInput{"", p.token_ids, std::nullopt});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = static_cast<int>(golden.prompts[0].generated.size());
  sp.ignore_eos = true;
  auto res = (*llm)->generate(prompts, sp);
  EXPECT_TRUE(res.ok());
  if (!res.ok()) return 0;
  int agree = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE((*res)[i].error.empty()) << (*res)[i].error;
    const auto& got = (*res)[i].outputs[0].token_ids;
    if (got == golden.prompts[i].generated) {
      ++agree;
      continue;
    }
    size_t first = 0;
    while (first < got.size() && got[first] == golden.prompts[i].generated[first]) ++first;
    const auto& margins = golden.prompts[i].gen_margins;
    const double margin = first < margins.size() ? margins[first] : -1.0;
    if (diverged_at_near_tie != nullptr && margin >= 0 && margin < kNearTieMargin) ++*diverged_at_near_tie;
    std::printf("[ info    ] %s (%s): continuation of %s diverges at token %zu (reference margin %.4f)\n",
                path.c_str(), exact ? "exact" : "fast", golden.prompts[i].id.c_str(), first, margin);
  }
  std::printf("[ metrics ] %s (%s, kv %s, dtype %s): %d of %zu greedy continuations agree with transformers\n",
              path.c_str(), exact ? "exact" : "fast", kv_dtype, dtype, agree, prompts.size());
  return agree;
}

TEST_P(ModelGoldenTest, GreedyContinuationsAgreeWithTransformers) {
  const int n = static_cast<int>(golden_.prompts.size());
  EXPECT_GE(count_agreeing_continuations(path_, golden_, /*exact=*/true) * 20, n * 19);
}

TEST_P(ModelGoldenTest, FastPathGreedyContinuationsAgreeWithTransformers) {
  const int n = static_cast<int>(golden_.prompts.size());
  EXPECT_GE(count_agreeing_continuations(path_, golden_, /*exact=*/false) * 20, n * 19);
}

// --dtype bfloat16 on an HF directory of float32 weights (as vLLM-CPU runs them): the layers'
// matrices are rounded to bf16 at load (2^-9 relative per weight); the vocabulary tables stay
// float32 (Backend::upload_vocab_table). Rounding those too gave 16/20 (SmolLM2) and 15/20
// (Gemma 3), Gemma's "whitespace" prompt diverging at its first token (margin 0.012). Now, on the
// 2-vCPU EPYC: SmolLM2 18/20, both others diverging at reference near ties (margins 0.0036 and
// 0.0062); Gemma 3 20/20. The bar: 19/20 agreeing or diverging only at a near tie, and 18/20
// strictly. GGUF files keep their blocks (skipped).
TEST_P(ModelGoldenTest, Bfloat16WeightsGreedyContinuationsAgreeWithTransformersUpToNearTies) {
  if (!file_exists(path_ + "/config.json")) GTEST_SKIP() << "--dtype converts the dense matrices of HF directories";
  const int n = static_cast<int>(golden_.prompts.size());
  int at_near_tie = 0;
  const int agree = count_agreeing_continuations(path_, golden_, /*exact=*/false, "auto", "bfloat16", &at_near_tie);
  EXPECT_GE((agree + at_near_tie) * 20, n * 19) << agree << " agree, " << at_near_tie << " diverge at near ties";
  EXPECT_GE(agree * 20, n * 18);
}

// Runs the first 10 golden prompts as one mixed-length batch and one at a time; returns the
// batched last-position logits and the worst relative L2 between batched and single rows.
struct MixedBatchResult {
  std::vector<float> batched;
  double worst = 0;
  std::vector<float> k_scales, v_scales;  // the cache's per-layer scales after the runs
};

MixedBatchResult run_mixed_batch(LoadedModel& m, const Golden& golden) {
  MixedBatchResult r;
  const size_t num = std::min<size_t>(10, golden.prompts.size());
  std::vector<std::vector<int32_t>> seqs;
  int longest = 0;
  for (size_t i = 0; i < num; ++i) {
    seqs.push_back(golden.prompts[i].token_ids);
    longest = std::max(longest, static_cast<int>(seqs.back().size()));
  }
  const size_t V = static_cast<size_t>(m.config.vocab_size);
  ContiguousBatch together(static_cast<int>(num), longest, 16);
  auto cache = m.model->allocate_kv_cache(together.num_blocks_needed(), 16);
  EXPECT_TRUE(cache.ok());
  if (!cache.ok()) return r;
  r.batched.resize(num * V);
  std::vector<float> single(V);
  EXPECT_TRUE(m.model->forward(together.build(seqs), *cache, r.batched.data()).ok());
  for (size_t i = 0; i < num; ++i) {
    ContiguousBatch alone(1, longest, 16);
    EXPECT_TRUE(m.model->forward(alone.build({seqs[i]}), *cache, single.data()).ok());
    r.worst = std::max(r.worst, rel_l2(r.batched.data() + i * V, single.data(), V));
  }
  for (const Tensor& t : cache->k) r.k_scales.push_back(t.cache_scale);
  for (const Tensor& t : cache->v) r.v_scales.push_back(t.cache_scale);
  return r;
}

int mixed_batch_tokens(const Golden& golden) {
  int total = 0;
  for (size_t i = 0; i < std::min<size_t>(10, golden.prompts.size()); ++i) {
    total += static_cast<int>(golden.prompts[i].token_ids.size());
  }
  return total;
}

TEST_P(ModelGoldenTest, MixedLengthBatchEqualsOneAtATime) {
  const int num = static_cast<int>(std::min<size_t>(10, golden_.prompts.size()));
  for (bool exact : {true, false}) {
    auto m = load(exact, mixed_batch_tokens(golden_), num);
    ASSERT_TRUE(m);
    const double worst = run_mixed_batch(*m, golden_).worst;
    std::printf("[ metrics ] %s (%s): batched vs single worst relative L2 %.3g\n", GetParam().path,
                exact ? "exact" : "fast", worst);
    EXPECT_LE(worst, 1e-5);
  }
}

// --kv-cache-dtype float16 (opt-in): K/V rounded to float16 in the cache. Still batch-invariant;
// logits close to the float32 cache's; greedy continuations measured against transformers. The
// cache does not depend on the weights' format, so the GGUF cases suffice (HF directories skip).
TEST_P(ModelGoldenTest, Float16KvCache) {
  // Measured: SmolLM2 Q4_1 1.3e-3 and 20/20 (5.2e-4 and 19/20 before the SiLU's vector exp; the
  // math prompt turned at token 4), Gemma-3 Q4_K_M 8.7e-4 and 20/20. float16 rounds each K/V value
  // by up to 2^-11 relative; 30 layers amplify that to ~1e-3 in the logits. The bar for
  // continuations is the fast path's own.
  constexpr double kMaxRelL2 = 5e-3;
  constexpr int kMinAgree = 19;
  if (file_exists(path_ + "/config.json")) GTEST_SKIP() << "the float16 cache is exercised through the GGUF cases";
  const int num = static_cast<int>(std::min<size_t>(10, golden_.prompts.size()));
  auto m32 = load(/*exact=*/false, mixed_batch_tokens(golden_), num);
  auto m16 = load(/*exact=*/false, mixed_batch_tokens(golden_), num, "float16");
  ASSERT_TRUE(m32 && m16);
  ASSERT_EQ(m16->backend->kv_cache_dtype(), DType::kF16);
  const MixedBatchResult r32 = run_mixed_batch(*m32, golden_), r16 = run_mixed_batch(*m16, golden_);
  const size_t V = static_cast<size_t>(m16->config.vocab_size);
  double worst_vs_f32 = 0;
  for (int i = 0; i < num; ++i) {
    worst_vs_f32 = std::max(worst_vs_f32, rel_l2(r16.batched.data() + i * V, r32.batched.data() + i * V, V));
  }
  const int n = static_cast<int>(golden_.prompts.size());
  const int agree = count_agreeing_continuations(path_, golden_, /*exact=*/false, "float16");
  std::printf("[ metrics ] %s (fast, kv float16): batched vs single worst relative L2 %.3g, vs float32 cache %.3g\n",
              GetParam().path, r16.worst, worst_vs_f32);
  EXPECT_LE(r16.worst, 1e-5);
  EXPECT_LT(worst_vs_f32, kMaxRelL2);
  EXPECT_GE(agree * 20, n * kMinAgree);
}

// Greedy continuations of every golden prompt with the given KV-cache dtype (fast path).
std::vector<std::vector<int32_t>> greedy_continuations(const std::string& path, const Golden& golden, const char* kv_dtype,
                                                       bool calculate_kv_scales = false) {
  EngineArgs ea;
  ea.model = path;
  ea.kv_cache_memory = int64_t{512} << 20;
  ea.max_num_seqs = 32;
  ea.kv_cache_dtype = kv_dtype;
  ea.calculate_kv_scales = calculate_kv_scales;
  auto llm = LLM::create(ea);
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  if (!llm.ok()) return {};
  std::vector<PromptInput> prompts;
  for (const auto& p : golden.prompts) prompts.push_back(PromptInput{"", p.token_ids, std::nullopt});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = static_cast<int>(golden.prompts[0].generated.size());
  sp.ignore_eos = true;
  auto res = (*llm)->generate(prompts, sp);
  EXPECT_TRUE(res.ok());
  std::vector<std::vector<int32_t>> out;
  if (!res.ok()) return out;
  for (const auto& r : *res) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    out.push_back(r.outputs.empty() ? std::vector<int32_t>{} : r.outputs[0].token_ids);
  }
  return out;
}

// How far greedy continuations follow the reference's: whole ones equal, and tokens before each
// one's first difference; printed as a metrics line (and each departure as an info line).
struct ContinuationAgreement {
  int equal = 0;
  size_t agreeing_tokens = 0, total_tokens = 0;
};
ContinuationAgreement compare_continuations(const std::vector<std::vector<int32_t>>& reference,
                                            const std::vector<std::vector<int32_t>>& got, const Golden& golden,
                                            const char* model, const char* what) {
  ContinuationAgreement a;
  const size_t n = golden.prompts.size();
  EXPECT_EQ(reference.size(), n);
  EXPECT_EQ(got.size(), n);
  for (size_t i = 0; i < n && i < reference.size() && i < got.size(); ++i) {
    size_t first = 0;
    while (first < got[i].size() && first < reference[i].size() && got[i][first] == reference[i][first]) ++first;
    a.agreeing_tokens += first;
    a.total_tokens += reference[i].size();
    if (got[i] == reference[i]) ++a.equal;
    else std::printf("[ info    ] %s (%s): %s leaves the float cache's continuation at token %zu\n", model, what,
                     golden.prompts[i].id.c_str(), first);
  }
  std::printf("[ metrics ] %s (fast, %s): %d of %zu greedy continuations equal the float32 cache's; %zu of %zu tokens "
              "before the first difference\n", model, what, a.equal, n, a.agreeing_tokens, a.total_tokens);
  return a;
}

// --kv-cache-dtype fp8 (e4m3, scale 1 as vLLM without checkpoint scales) and fp8_e5m2: K/V kept
// as 8-bit codes, a quarter of the float32 cache's bytes per block (half of float16's: twice the
// tokens per GiB), widened when read. Each K/V value moves by up to 2^-4 (e4m3) or 2^-3 (e5m2)
// relative, ~100x float16's rounding, and 30 layers carry that into the logits; greedy
// continuations of 64 tokens then leave the float cache's at the first close call. Issue 15 asks
// for 19 of 20 continuations equal to the higher-precision cache's: NOT met on these small models
// (measured below); the bars hold the measured quality so a regression in the FP8 path fails. The
// GGUF cases suffice: the cache does not depend on the weights' format.
TEST_P(ModelGoldenTest, Fp8KvCacheAgainstTheFloatCache) {
  if (file_exists(path_ + "/config.json")) GTEST_SKIP() << "the FP8 cache is exercised through the GGUF cases";
  const int num = static_cast<int>(std::min<size_t>(10, golden_.prompts.size()));
  auto m32 = load(/*exact=*/false, mixed_batch_tokens(golden_), num);
  auto m16 = load(/*exact=*/false, mixed_batch_tokens(golden_), num, "float16");
  ASSERT_TRUE(m32 && m16);
  const MixedBatchResult r32 = run_mixed_batch(*m32, golden_);
  const size_t V = static_cast<size_t>(m32->config.vocab_size);
  for (const char* dtype : {"fp8", "fp8_e5m2"}) {
    auto m8 = load(/*exact=*/false, mixed_batch_tokens(golden_), num, dtype);
    ASSERT_TRUE(m8);
    EXPECT_EQ(m8->model->kv_cache_bytes_per_block(16) * 4, m32->model->kv_cache_bytes_per_block(16));
    EXPECT_EQ(m8->model->kv_cache_bytes_per_block(16) * 2, m16->model->kv_cache_bytes_per_block(16));
    const MixedBatchResult r8 = run_mixed_batch(*m8, golden_);
    double worst = 0;
    for (int i = 0; i < num; ++i) worst = std::max(worst, rel_l2(r8.batched.data() + i * V, r32.batched.data() + i * V, V));
    std::printf("[ metrics ] %s (fast, kv %s): batched vs single %.3g, last-position logits vs float32 cache %.3g\n",
                GetParam().path, dtype, r8.worst, worst);
    EXPECT_LE(r8.worst, 1e-5) << dtype << ": still batch invariant";
    // Measured (2026-12-03): SmolLM2 e4m3 0.080, e5m2 0.086; Gemma 3 e4m3 0.133, e5m2 0.078 (e4m3's
    // subnormals start at 2^-6, where a scale of 1 leaves part of the small V values; e5m2's at
    // 2^-14). The figure moves with the float32 run's rounding order: SmolLM2 e5m2 0.086-0.123
    // (2026-12-04, AMD EPYC Zen 5, by kernel set). A wrong scale gives ~5.
    EXPECT_LT(worst, 0.2) << dtype;
    EXPECT_GT(worst, 1e-4) << dtype << ": a cache this close to float32 is not storing FP8";
  }
  // Continuations (e4m3 only: the CI budget). Measured: SmolLM2 5 of 20 equal, 620 of 1,280 tokens
  // before the first difference; Gemma 3 4 of 20, 555 of 1,280. A broken cache gives 0 and 0.
  const ContinuationAgreement a = compare_continuations(greedy_continuations(path_, golden_, "auto"),
                                                        greedy_continuations(path_, golden_, "fp8"), golden_,
                                                        GetParam().path, "kv fp8");
  EXPECT_GE(a.equal, 2);
  EXPECT_GE(a.agreeing_tokens * 3, a.total_tokens) << "a third of the tokens agree before the first difference";
}

// --calculate-kv-scales: each layer's FP8 scales from the first forward's K and V (max |K| / 200,
// max |V| / 100, as vLLM computes them), then kept: the batched forward sets them and the prompts
// run alone through the same cache reuse them, so batch invariance holds after the first batch.
// Measured with scale 1 (Fp8KvCacheAgainstTheFloatCache): SmolLM2 e4m3 logits 0.080, Gemma 3
// 0.133; printed here with calculated scales, and the continuations against the float cache's.
TEST_P(ModelGoldenTest, Fp8KvCacheWithCalculatedScales) {
  if (file_exists(path_ + "/config.json")) GTEST_SKIP() << "the FP8 cache is exercised through the GGUF cases";
  const int num = static_cast<int>(std::min<size_t>(10, golden_.prompts.size()));
  auto m32 = load(/*exact=*/false, mixed_batch_tokens(golden_), num);
  auto m8 = load(/*exact=*/false, mixed_batch_tokens(golden_), num, "fp8", /*calculate_kv_scales=*/true);
  ASSERT_TRUE(m32 && m8);
  EXPECT_TRUE(m8->backend->calculates_kv_scales());
  const MixedBatchResult r32 = run_mixed_batch(*m32, golden_);
  const MixedBatchResult r8 = run_mixed_batch(*m8, golden_);
  ASSERT_EQ(r8.k_scales.size(), static_cast<size_t>(m8->config.num_layers));
  for (size_t l = 0; l < r8.k_scales.size(); ++l) {
    // Set from data: positive, not the default 1 (these models' |K| and |V| are far from 200 / 100).
    EXPECT_GT(r8.k_scales[l], 0.0f) << "layer " << l;
    EXPECT_NE(r8.k_scales[l], 1.0f) << "layer " << l;
    EXPECT_GT(r8.v_scales[l], 0.0f) << "layer " << l;
    EXPECT_NE(r8.v_scales[l], 1.0f) << "layer " << l;
  }
  const size_t V = static_cast<size_t>(m32->config.vocab_size);
  double worst = 0;
  for (int i = 0; i < num; ++i) worst = std::max(worst, rel_l2(r8.batched.data() + i * V, r32.batched.data() + i * V, V));
  std::printf("[ metrics ] %s (fast, kv fp8, calculated scales: layer 0 k %.4g v %.4g): batched vs single %.3g, "
              "last-position logits vs float32 cache %.3g\n",
              GetParam().path, r8.k_scales[0], r8.v_scales[0], r8.worst, worst);
  EXPECT_LE(r8.worst, 1e-5) << "the scales, once set, are the same for every later batch";
  EXPECT_LT(worst, 0.2);
  EXPECT_GT(worst, 1e-4) << "a cache this close to float32 is not storing FP8";
  const ContinuationAgreement a = compare_continuations(
      greedy_continuations(path_, golden_, "auto"),
      greedy_continuations(path_, golden_, "fp8", /*calculate_kv_scales=*/true), golden_, GetParam().path,
      "kv fp8, calculated scales");
  // Measured: SmolLM2 529 and 618 of 1,280 tokens in two runs (the engine's first step, which sets
  // the scales, need not batch the same prompts every run), Gemma 3 509. A broken cache gives ~0.
  EXPECT_GE(a.agreeing_tokens * 4, a.total_tokens) << "a quarter of the tokens agree before the first difference";
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGoldenTest,
                         ::testing::Values(ModelCase{"smollm2", "models/SmolLM2-135M-Instruct.Q4_1.gguf"},
                                           ModelCase{"smollm2", "models/smollm2-hf"},
                                           ModelCase{"gemma3", "models/gemma-3-270m-q4_k_m.gguf"},
                                           ModelCase{"gemma3", "models/gemma3-hf"}),
                         [](const auto& info) {
                           std::string s = info.param.path;
                           for (auto& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

}  // namespace
}  // namespace kvasir::testing
