// EAGLE-3 (CudaEagle3.*) and EAGLE-1 (CudaEagle.*) on the GPU. CpuTwin: the tiny target of
// tests/data/eagle3 with the EAGLE-3 head there or the EAGLE-1 head of tests/data/eagle, on the
// CUDA backend and on the CPU backend (exact matmuls), driven as the runner drives them (a prompt in
// two chunks, then two verify-like steps): the target's aux states each step (EAGLE-3: what the
// head reads; bf16 on the GPU: rel L2 < 2e-2), the head's draft logits of each step's last pass
// (rel L2 < 3e-2, where the drafts fed to that pass agree) and its drafts (argmax; a near tie may
// flip one, so at most one differs).
// Engine: a random-weight Llama with a dummy-weight head (configs-style config.json, --load-format
// dummy) through the engine on the GPU: greedy outputs follow plain decoding over their first
// kSameFirstTokens tokens (GPU batching is not bit-exact, as cuda_spec_decode_e2e_test says), the
// head drafted, and nothing failed.
// Graphs: the head's passes in steady decoding (a verify step's accepted tokens, then one-token
// draft passes) are padded one-query rows (runner/draft_pass_batch.h), so they replay captured
// graphs. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "common/scoped_env_test_util.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "kvasir/llm.h"
#include "loader/weight_source.h"
#include "model/draft_heads/eagle3_head.h"
#include "model/draft_heads/eagle_head.h"
#include "model/registry.h"
#include "runner/eagle_proposer.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

// From the working directory when it is a checkout (the GPU machine runs from its own copy, where
// the build machine's KVASIR_SOURCE_DIR does not exist), else from the source tree.
const std::string kDir = std::ifstream("tests/data/eagle3/tiny_head/config.json").good()
                             ? std::string("tests/data/eagle3/")
                             : std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/";
const std::string kEagleDir = std::ifstream("tests/data/eagle/tiny_head/config.json").good()
                                  ? std::string("tests/data/eagle/")
                                  : std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle/";

// One backend's target + head + proposer over the tiny checkpoints.
struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<WeightSource> tw, hw;
  std::unique_ptr<DecoderModel> target;
  KvCache target_cache;
  std::unique_ptr<DraftHead> head;
  Eagle3Head* eagle3 = nullptr;  // one of the two: the head as its kind
  EagleHead* eagle = nullptr;
  KvCache head_cache;
  std::unique_ptr<EagleProposer> proposer;

  // method: "eagle3" or "eagle".
  void init(std::unique_ptr<Backend> b, const std::string& method) {
    backend = std::move(b);
    const std::string head_dir = (method == "eagle3" ? kDir : kEagleDir) + "tiny_head";
    auto t = open_weights(kDir + "tiny_target");
    auto h0 = open_weights(head_dir);
    ASSERT_TRUE(t.ok() && h0.ok());
    tw = std::move(t).value();
    hw = std::move(h0).value();
    auto cfg = load_model_config(*tw);
    ASSERT_TRUE(cfg.ok());
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_logits = 8;
    auto m = DecoderModel::create(*cfg, *tw, *backend, mo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    target = std::move(*m);
    auto tc = target->allocate_kv_cache(32, 4);
    ASSERT_TRUE(tc.ok());
    target_cache = std::move(tc).value();
    if (method == "eagle3") {
      auto hc = parse_eagle3_head_config(*read_text_file(head_dir + "/config.json"), *cfg, "tiny_head");
      ASSERT_TRUE(hc.ok());
      auto h = Eagle3Head::create(*hc, *hw, *target, 64, 8);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      eagle3 = h->get();
      head = std::move(*h);
    } else {
      auto hc = parse_eagle_head_config(*read_text_file(head_dir + "/config.json"), *cfg, "tiny_head");
      ASSERT_TRUE(hc.ok());
      auto h = EagleHead::create(*hc, *hw, *target, 64, 8);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      eagle = h->get();
      head = std::move(*h);
    }
    auto hc2 = head->allocate_kv_cache(32, 4);
    ASSERT_TRUE(hc2.ok());
    head_cache = std::move(hc2).value();
    proposer = std::make_unique<EagleProposer>(*head, head_cache);
  }
  // The head's logits row width (its draft vocabulary) and the last pass's logits of `row`.
  int64_t logits_cols() const { return eagle3 ? eagle3->config().draft_vocab_size : eagle->config().layer.vocab_size; }
  Status draft_logits(int32_t row, float* out) {
    return eagle3 ? eagle3->draft_logits(&row, 1, out) : eagle->draft_logits(&row, 1, out);
  }
  // The first `rows` rows of each captured aux layer, as float32 (bf16 on the GPU).
  std::vector<float> aux_rows(int rows) {
    const Tensor& aux = target->aux_hidden_states();
    std::vector<uint8_t> raw(aux.row_bytes() * static_cast<size_t>(aux.rows()));
    backend->copy_to_host(aux, raw.data());
    const int64_t H = aux.cols(), per_layer = target->max_num_tokens();
    std::vector<float> out;
    for (int64_t j = 0; j < aux.rows() / per_layer; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < H; ++c) {
          const size_t i = static_cast<size_t>((j * per_layer + r) * H + c);
          if (aux.dtype == DType::kF32) {
            out.push_back(reinterpret_cast<const float*>(raw.data())[i]);
          } else {
            const uint32_t bits = uint32_t{reinterpret_cast<const uint16_t*>(raw.data())[i]} << 16;
            float f;
            std::memcpy(&f, &bits, 4);
            out.push_back(f);
          }
        }
      }
    }
    return out;
  }
  // Target forward over one sequence's tokens at [first, first + n) (blocks 1..16).
  void forward(const std::vector<int32_t>& tokens, int32_t first) {
    std::vector<int32_t> pos, qsl = {0, static_cast<int32_t>(tokens.size())}, lens, tables;
    std::vector<int64_t> slots;
    for (size_t j = 0; j < tokens.size(); ++j) {
      const int32_t p = first + static_cast<int32_t>(j);
      pos.push_back(p);
      slots.push_back(int64_t{1 + p / 4} * 4 + p % 4);
    }
    lens.push_back(first + static_cast<int32_t>(tokens.size()));
    for (int b = 1; b <= 16; ++b) tables.push_back(b);
    ForwardBatch fb;
    fb.num_tokens = static_cast<int>(tokens.size());
    fb.input_ids = tokens.data();
    fb.positions = pos.data();
    fb.attn = AttentionMetadata{1, fb.num_tokens, qsl.data(), lens.data(), tables.data(), 16, slots.data(), 4};
    ASSERT_TRUE(target->run_layers(fb, target_cache).ok());
    // These host arrays die here: the step must run before (backend.h), as the runner's sampling
    // runs it before its proposer drafts.
    backend->synchronize();
  }
};

void head_and_proposer_match_the_cpu_twin(const std::string& method) {
  Side gpu, cpu;
  auto g = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  gpu.init(std::move(*g), method);
  CpuBackendOptions bo;
  bo.precision = MatmulPrecision::kExact;
  cpu.init(std::make_unique<CpuBackend>(bo), method);
  const std::vector<int32_t> prompt = {5, 17, 200, 33, 91, 4, 250, 12, 77, 140, 3, 9};
  std::vector<int32_t> history = prompt;
  history.push_back(60);
  int differing = 0, compared = 0;
  std::vector<TokenId> drafts[2];
  auto step = [&](const std::vector<int32_t>& tokens, int32_t first, int32_t valid, const std::vector<int32_t>& hist,
                  int k) {
    Side* sides[2] = {&gpu, &cpu};
    for (int s = 0; s < 2; ++s) {
      sides[s]->forward(tokens, first);
      if (s == 1 && method == "eagle3") {
        // The target's aux states of this step agree before the head reads them.
        const std::vector<float> a = gpu.aux_rows(static_cast<int>(tokens.size())), b = cpu.aux_rows(static_cast<int>(tokens.size()));
        ASSERT_EQ(a.size(), b.size());
        double n2 = 0, d2 = 0;
        for (size_t i = 0; i < a.size(); ++i) n2 += (a[i] - b[i]) * (a[i] - b[i]), d2 += b[i] * b[i];
        std::printf("step at %d: target aux states rel L2 %.2e\n", first, std::sqrt(n2 / d2));
        EXPECT_LT(std::sqrt(n2 / d2), 2e-2);
      }
      EagleStepRow row{"r", hist, first, valid, 0, k, k > 0 ? &drafts[s] : nullptr};
      sides[s]->proposer->run_step(std::span<const EagleStepRow>(&row, 1));
      // The last pass's logits, on both backends.
    }
    if (k == 0) return;
    std::vector<float> l[2];
    const size_t cols = static_cast<size_t>(cpu.logits_cols());
    for (int s = 0; s < 2; ++s) {
      l[s].resize(cols);
      ASSERT_TRUE(sides[s]->draft_logits(0, l[s].data()).ok());
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < cols; ++i) num += (l[0][i] - l[1][i]) * (l[0][i] - l[1][i]), den += l[1][i] * l[1][i];
    std::printf("draft pass logits rel L2 %.2e; drafts gpu", std::sqrt(num / den));
    for (TokenId t : drafts[0]) std::printf(" %d", t);
    std::printf(" cpu");
    for (TokenId t : drafts[1]) std::printf(" %d", t);
    std::printf("; logits gpu");
    for (int i = 0; i < 6; ++i) std::printf(" %.3f", l[0][i]);
    std::printf(" cpu");
    for (int i = 0; i < 6; ++i) std::printf(" %.3f", l[1][i]);
    std::printf("\n");
    ASSERT_EQ(drafts[0].size(), drafts[1].size());
    // The last pass read the drafts before it: once a near tie flipped one of them (bf16 against
    // float32), its inputs differ on the two sides and its logits are not comparable.
    const bool same_inputs = std::equal(drafts[0].begin(), drafts[0].end() - 1, drafts[1].begin());
    if (same_inputs) {
      EXPECT_LT(std::sqrt(num / den), 3e-2);
    }
    for (size_t i = 0; i < drafts[0].size(); ++i) differing += drafts[0][i] != drafts[1][i], ++compared;
  };
  step(std::vector<int32_t>(prompt.begin(), prompt.begin() + 7), 0, 7, prompt, 0);
  step(std::vector<int32_t>(prompt.begin() + 7, prompt.end()), 7, 5, history, 4);
  // A verify of [60, cpu drafts...] that keeps the first draft, then the bonus 99.
  const std::vector<TokenId> d = drafts[1];
  std::vector<int32_t> verify = {60};
  verify.insert(verify.end(), d.begin(), d.end());
  history.push_back(d[0]);
  history.push_back(99);
  step(verify, 12, 2, history, 4);
  EXPECT_LE(differing, 1) << "of " << compared << " drafts";
}

TEST(CudaEagle3, HeadAndProposerMatchTheCpuTwin) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  head_and_proposer_match_the_cpu_twin("eagle3");
}

TEST(CudaEagle, HeadAndProposerMatchTheCpuTwin) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  head_and_proposer_match_the_cpu_twin("eagle");
}

void draft_passes_replay_captured_graphs(const std::string& method) {
  Side gpu;
  auto g = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  gpu.init(std::move(*g), method);
  const std::vector<int32_t> prompt = {5, 17, 200, 33, 91, 4, 250, 12, 77, 140, 3, 9};
  std::vector<int32_t> history = prompt;
  history.push_back(60);
  constexpr int k = 3;
  std::vector<TokenId> drafts;
  gpu.forward(prompt, 0);
  EagleStepRow first{"r", history, 0, 12, 0, k, &drafts};
  gpu.proposer->run_step(std::span<const EagleStepRow>(&first, 1));
  ASSERT_EQ(drafts.size(), static_cast<size_t>(k));
  // Verify steps that keep the first draft, then a bonus token: 2 accepted positions each.
  int64_t replays = 0, passes = 0;
  constexpr int kSteps = 24;  // positions up to 63: the 16 target blocks of 4 the Side's forward uses
  for (int step = 0; step < kSteps; ++step) {
    const int32_t pos = static_cast<int32_t>(history.size()) - 1;
    std::vector<int32_t> verify = {history.back()};
    verify.insert(verify.end(), drafts.begin(), drafts.end());
    gpu.forward(verify, pos);
    history.push_back(drafts[0]);
    history.push_back(static_cast<int32_t>(100 + step));
    const int64_t g0 = cuda_test::step_counts(*gpu.backend).graph_replays, p0 = gpu.proposer->num_forward_passes();
    EagleStepRow row{"r", history, pos, 2, 0, k, &drafts};
    gpu.proposer->run_step(std::span<const EagleStepRow>(&row, 1));
    ASSERT_EQ(drafts.size(), static_cast<size_t>(k));
    replays += cuda_test::step_counts(*gpu.backend).graph_replays - g0;
    passes += gpu.proposer->num_forward_passes() - p0;
  }
  std::printf("%s: %lld of %lld head passes ran as graphs; %s\n", method.c_str(), static_cast<long long>(replays),
              static_cast<long long>(passes), gpu.backend->stats().c_str());
  EXPECT_EQ(passes, kSteps * k);
  // The prompt's 12 tokens are a short run too.
  EXPECT_EQ(gpu.proposer->num_one_query_passes(), gpu.proposer->num_forward_passes());
  // Each shape (first pass / one-token pass, block table width, the head's double-buffered
  // hidden states) runs eagerly once, then is captured: most passes are graphs. Unpadded, every
  // step's first pass (2 tokens of one sequence: prefill attention) ran eagerly: at most 2/3.
  EXPECT_GE(replays * 4, passes * 3);
}

TEST(CudaEagle3, DraftPassesReplayCapturedGraphs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  draft_passes_replay_captured_graphs("eagle3");
}

TEST(CudaEagle, DraftPassesReplayCapturedGraphs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  draft_passes_replay_captured_graphs("eagle");
}

constexpr size_t kSameFirstTokens = 16;

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// method "eagle3" or "eagle": its head's config.json, dummy weights.
void engine_with_a_dummy_head_follows_plain_decoding(const std::string& method) {
  // Both runs on one decode attention family, as CudaSpecDecode.GreedyNgram* says why
  // (cuda_spec_decode_e2e_test.cpp): FlashInfer's and our kernels round differently.
  const ScopedEnv one_family("KVASIR_CUDA_DECODE", "own");
  const std::string target = write_file("eagle3_target.json", R"({"model_type": "llama", "hidden_size": 512,
    "intermediate_size": 1024, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 512, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 4096,
    "tie_word_embeddings": false, "eos_token_id": 2, "bos_token_id": 1})");
  const std::string head =
      method == "eagle3"
          ? write_file("eagle3_head.json", R"({"architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_key_value_heads": 2, "vocab_size": 512, "draft_vocab_size": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 4096, "num_hidden_layers": 1})")
          : write_file("eagle_head.json", R"({"architectures": ["EagleLlamaForCausalLM"],
    "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5, "bias": true,
    "rope_theta": 500000.0, "max_position_embeddings": 4096, "num_hidden_layers": 1})");
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> ids;
    for (int j = 0; j < 20 + 7 * i; ++j) ids.push_back(3 + (j * 37 + i * 11) % 500);
    prompts.push_back(PromptInput{"", ids, std::nullopt});
  }
  std::vector<std::vector<int32_t>> out[2];
  int64_t drafts = 0;
  for (int spec = 0; spec < 2; ++spec) {
    EngineArgs a;
    a.model = target;
    a.device = "cuda";
    a.load_format = "dummy";
    a.max_num_seqs = 16;
    a.max_num_batched_tokens = 256;
    a.gpu_memory_utilization = 0.1;
    if (spec) {
      a.speculative.method = method;
      a.speculative.draft_model = head;
      a.speculative.num_speculative_tokens = 3;
      setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
    }
    auto llm = LLM::create(a);
    unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
    ASSERT_TRUE(llm.ok()) << llm.status().message();
    SamplingParams sp;
    sp.max_tokens = 48;
    sp.ignore_eos = true;
    sp.temperature = 0.0f;
    auto res = (*llm)->generate(prompts, sp);
    ASSERT_TRUE(res.ok());
    for (const auto& r : *res) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      out[spec].push_back(r.outputs.empty() ? std::vector<int32_t>{} : r.outputs[0].token_ids);
    }
    if (spec) {
      const EngineMetrics& m = (*llm)->engines().replica(0).metrics();
      drafts = m.spec_decode_num_drafts.load();
      std::printf("%s: %lld drafts, %lld draft tokens, %lld accepted; %s\n", method.c_str(), static_cast<long long>(drafts),
                  static_cast<long long>(m.spec_decode_num_draft_tokens.load()),
                  static_cast<long long>(m.spec_decode_num_accepted_tokens.load()), (*llm)->model().backend->stats().c_str());
    }
  }
  EXPECT_GT(drafts, 0);
  ASSERT_EQ(out[0].size(), out[1].size());
  int whole = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    ASSERT_GE(out[1][i].size(), kSameFirstTokens);
    EXPECT_TRUE(std::equal(out[0][i].begin(), out[0][i].begin() + kSameFirstTokens, out[1][i].begin())) << "prompt " << i;
    whole += out[0][i] == out[1][i];
  }
  std::printf("whole outputs equal: %d of %zu\n", whole, out[0].size());
}

TEST(CudaEagle3, EngineWithADummyHeadFollowsPlainDecoding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  engine_with_a_dummy_head_follows_plain_decoding("eagle3");
}

TEST(CudaEagle, EngineWithADummyHeadFollowsPlainDecoding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  engine_with_a_dummy_head_follows_plain_decoding("eagle");
}

}  // namespace
}  // namespace kvasir
