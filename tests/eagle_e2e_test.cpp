// Speculative methods "eagle3" and "eagle" (each test runs for both) end to end on the real
// SmolLM2 (CPU): greedy tokens equal plain decoding token for token one at a time, batched and
// under forced preemption, and seeded sampling with n > 1 matches plain; the spec_decode counters
// count the head's drafts (and, with every draft verified, some accepted); a head for another
// hidden size, or a path that is no head, is refused at load.
//
// The heads are written here, into a temporary directory, in the checkpoint formats vLLM loads
// (config.json + model.safetensors, scripts/gen_eagle_heads.py's tiny heads have the same
// layouts), built from SmolLM2's own weights rather than random ones, so that some drafts are
// accepted. EAGLE-3: fc picks the hidden state entering the last layer (aux layers 2, 15, 29;
// fc = [0 | 0 | I]), attention and MLP outputs are zero, and norm / lm_head are the target's
// final norm and its (tied) embedding rows of a draft vocabulary of the first 8192 ids. EAGLE-1:
// fc = [0 | I] picks the target's final-normed hidden state, attention and MLP outputs are zero,
// and the target's own lm_head reads it. At position p both guess token p + 1 (which the head
// already knows) as token p + 2, so a draft is accepted where the text repeats a token: a few
// percent (the counters are printed), enough to exercise accepting and rolling back. A trained
// head accepts far more; none is small enough to commit.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "loader/weight_source.h"
#include "quant/dequantize.h"

namespace kvasir::testing {
namespace {

const char* kGguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int64_t kHidden = 576, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kFfn = 64, kDraftVocab = 8192;

using Bytes = std::vector<uint8_t>;

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "I64"
  std::vector<int64_t> shape;
  Bytes data;
};

// safetensors: an 8-byte little-endian header length, the JSON header, the tensors packed.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  std::string h = "{";
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (h.size() > 1) h += ",";
    h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), sizeof(n));
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors) f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
}

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> dequantized(const WeightSource& w, const std::string& name, int64_t rows) {
  auto t = w.tensor(name);
  EXPECT_TRUE(t.ok()) << name;
  const int64_t cols = t->shape.back();
  const size_t row_bytes = t->nbytes / static_cast<size_t>(t->num_elements() / cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(t->dtype, t->data + static_cast<size_t>(r) * row_bytes, out.data() + r * cols, cols);
  }
  return out;
}

std::string eagle_config_json(int64_t hidden) {
  return R"({"architectures": ["EagleLlamaForCausalLM"], "model_type": "llama", "hidden_size": )" +
         std::to_string(hidden) + R"(, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
  "intermediate_size": 64, "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
  "max_position_embeddings": 8192, "num_hidden_layers": 1, "bias": false})";
}

std::string eagle3_config_json(int64_t hidden) {
  return R"({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": )" +
         std::to_string(hidden) + R"(, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
  "intermediate_size": 64, "vocab_size": 49152, "draft_vocab_size": 8192, "rms_norm_eps": 1e-5,
  "rope_theta": 100000.0, "max_position_embeddings": 8192, "num_hidden_layers": 1,
  "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 29]}})";
}

// Small fixed q/k/v so attention runs real numbers; its output projection is zero.
std::vector<float> pattern(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>((i * 7919) % 17 - 8) / 8.0f;
  return v;
}

// Writes the EAGLE-1 head described above into `dir`.
void write_eagle_head(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  const int64_t H = kHidden, qd = kHeads * kHeadDim, kvd = kKvHeads * kHeadDim;
  std::vector<float> fc(static_cast<size_t>(H * 2 * H), 0.0f);
  for (int64_t i = 0; i < H; ++i) fc[static_cast<size_t>(i * 2 * H + H + i)] = 1.0f;
  const std::vector<float> ones(static_cast<size_t>(H), 1.0f);
  std::vector<StTensor> t = {
      {"fc.weight", "F32", {H, 2 * H}, f32_bytes(fc)},
      {"layers.0.post_attention_layernorm.weight", "F32", {H}, f32_bytes(ones)},
      {"layers.0.self_attn.q_proj.weight", "F32", {qd, H}, f32_bytes(pattern(qd * H, 0.02f))},
      {"layers.0.self_attn.k_proj.weight", "F32", {kvd, H}, f32_bytes(pattern(kvd * H, 0.02f))},
      {"layers.0.self_attn.v_proj.weight", "F32", {kvd, H}, f32_bytes(pattern(kvd * H, 0.02f))},
      {"layers.0.self_attn.o_proj.weight", "F32", {H, qd}, f32_bytes(std::vector<float>(static_cast<size_t>(H * qd)))},
      {"layers.0.mlp.gate_proj.weight", "F32", {kFfn, H}, f32_bytes(pattern(kFfn * H, 0.05f))},
      {"layers.0.mlp.up_proj.weight", "F32", {kFfn, H}, f32_bytes(pattern(kFfn * H, 0.05f))},
      {"layers.0.mlp.down_proj.weight", "F32", {H, kFfn}, f32_bytes(std::vector<float>(static_cast<size_t>(H * kFfn)))},
  };
  write_safetensors(dir + "/model.safetensors", t);
  std::ofstream(dir + "/config.json") << eagle_config_json(kHidden);
}

// Writes the EAGLE-3 head described above into `dir`.
void write_eagle3_head(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  auto src = open_weights(repo_path(kGguf));
  ASSERT_TRUE(src.ok());
  const int64_t H = kHidden, qd = kHeads * kHeadDim, kvd = kKvHeads * kHeadDim;
  std::vector<float> fc(static_cast<size_t>(H * 3 * H), 0.0f);
  for (int64_t i = 0; i < H; ++i) fc[static_cast<size_t>(i * 3 * H + 2 * H + i)] = 1.0f;
  const std::vector<float> ones(static_cast<size_t>(H), 1.0f);
  std::vector<StTensor> t = {
      {"fc.weight", "F32", {H, 3 * H}, f32_bytes(fc)},
      {"norm.weight", "F32", {H}, f32_bytes(dequantized(**src, "output_norm.weight", 1))},
      {"lm_head.weight", "F32", {kDraftVocab, H}, f32_bytes(dequantized(**src, "token_embd.weight", kDraftVocab))},
      {"midlayer.input_layernorm.weight", "F32", {H}, f32_bytes(ones)},
      {"midlayer.hidden_norm.weight", "F32", {H}, f32_bytes(ones)},
      {"midlayer.post_attention_layernorm.weight", "F32", {H}, f32_bytes(ones)},
      {"midlayer.self_attn.q_proj.weight", "F32", {qd, 2 * H}, f32_bytes(pattern(qd * 2 * H, 0.02f))},
      {"midlayer.self_attn.k_proj.weight", "F32", {kvd, 2 * H}, f32_bytes(pattern(kvd * 2 * H, 0.02f))},
      {"midlayer.self_attn.v_proj.weight", "F32", {kvd, 2 * H}, f32_bytes(pattern(kvd * 2 * H, 0.02f))},
      {"midlayer.self_attn.o_proj.weight", "F32", {H, qd}, f32_bytes(std::vector<float>(static_cast<size_t>(H * qd)))},
      {"midlayer.mlp.gate_proj.weight", "F32", {kFfn, H}, f32_bytes(pattern(kFfn * H, 0.05f))},
      {"midlayer.mlp.up_proj.weight", "F32", {kFfn, H}, f32_bytes(pattern(kFfn * H, 0.05f))},
      {"midlayer.mlp.down_proj.weight", "F32", {H, kFfn}, f32_bytes(std::vector<float>(static_cast<size_t>(H * kFfn)))},
      // Draft id d is target id d: d2t all zero (as vLLM leaves it without the tensor).
      {"d2t", "I64", {kDraftVocab}, Bytes(static_cast<size_t>(kDraftVocab) * 8, 0)},
  };
  write_safetensors(dir + "/model.safetensors", t);
  std::ofstream(dir + "/config.json") << eagle3_config_json(kHidden);
}

std::vector<PromptInput> prompts() {
  std::vector<PromptInput> out;
  for (const char* t : {"Repeat exactly: \"The quick brown fox jumps over the lazy dog.\"\nRepeat:",
                        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "The capital of France is",
                        "def add(a, b):\n    return a + b\n\ndef sub(a, b):",
                        "Write a short poem about the sea.", "Water boils at"}) {
    out.push_back(PromptInput{t, {}, std::nullopt});
  }
  return out;
}

// The parameter: the speculative method ("eagle3" or "eagle").
class EagleE2ETest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (!file_exists(repo_path(kGguf))) return;
    head_dir_ = "/tmp/kvasir_eagle_e2e_" + std::to_string(::getpid());
    write_eagle3_head(head_dir_ + "_eagle3");
    write_eagle_head(head_dir_ + "_eagle");
  }
  static void TearDownTestSuite() {
    if (head_dir_.empty()) return;
    for (const char* m : {"_eagle3", "_eagle"}) {
      std::remove((head_dir_ + m + "/model.safetensors").c_str());
      std::remove((head_dir_ + m + "/config.json").c_str());
      ::rmdir((head_dir_ + m).c_str());
    }
  }
  void SetUp() override {
    if (!file_exists(repo_path(kGguf))) GTEST_SKIP() << "models missing: run scripts/setup.sh";
  }
  static std::string head_dir() { return head_dir_ + "_" + GetParam(); }
  static EngineArgs args(bool eagle, int max_num_seqs = 8, int64_t kv_bytes = int64_t{64} << 20) {
    EngineArgs ea;
    ea.model = repo_path(kGguf);
    ea.max_num_seqs = max_num_seqs;
    ea.max_num_batched_tokens = 256;
    ea.kv_cache_memory = kv_bytes;
    if (eagle) {
      ea.speculative.method = GetParam();
      ea.speculative.draft_model = head_dir();
      ea.speculative.num_speculative_tokens = 3;
    }
    return ea;
  }
  static std::vector<std::vector<int32_t>> run(LLM& llm, const std::vector<PromptInput>& p, const SamplingParams& sp) {
    auto res = llm.generate(p, sp);
    EXPECT_TRUE(res.ok());
    std::vector<std::vector<int32_t>> out;
    if (!res.ok()) return out;
    for (const auto& r : *res) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      for (const auto& c : r.outputs) out.push_back(c.token_ids);
    }
    return out;
  }
  static SamplingParams greedy() {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 24;
    sp.ignore_eos = true;
    return sp;
  }
  // expect_accepted: every draft was verified, so the head's few-percent guesses were accepted
  // somewhere; under the adaptive budget a poor head is asked for few drafts (it may get none
  // accepted), but some are verified.
  static void report(const char* what, LLM& llm, bool expect_accepted = true) {
    const EngineMetrics& m = llm.engine().metrics();
    std::printf("[ metrics ] %s: %lld drafts, %lld draft tokens, %lld accepted, mean acceptance length %.2f\n", what,
                static_cast<long long>(m.spec_decode_num_drafts.load()),
                static_cast<long long>(m.spec_decode_num_draft_tokens.load()),
                static_cast<long long>(m.spec_decode_num_accepted_tokens.load()), m.spec_decode_mean_acceptance_length());
    EXPECT_GT(m.spec_decode_num_drafts.load(), 0) << what << ": no draft was ever verified";
    if (expect_accepted) {
      EXPECT_GT(m.spec_decode_num_accepted_tokens.load(), 0) << what << ": no draft was ever accepted";
    }
  }
  static std::string head_dir_;
};

std::string EagleE2ETest::head_dir_;

TEST_P(EagleE2ETest, GreedyEqualsPlainOneAtATimeBatchedAndUnderPreemption) {
  const auto ps = prompts();
  std::vector<std::vector<int32_t>> expected;
  {
    auto plain = LLM::create(args(false, 1));
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    for (const auto& p : ps) expected.push_back(run(**plain, {p}, greedy())[0]);
  }
  {
    auto solo = LLM::create(args(true, 1));
    ASSERT_TRUE(solo.ok()) << solo.status().to_string();
    std::vector<std::vector<int32_t>> got;
    for (const auto& p : ps) got.push_back(run(**solo, {p}, greedy())[0]);
    EXPECT_EQ(got, expected);
    report("one at a time", **solo, /*expect_accepted=*/false);
  }
  // Batched steps verify every draft: the adaptive budget would verify few at these batch sizes.
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  {
    auto batched = LLM::create(args(true, 8));
    ASSERT_TRUE(batched.ok());
    EXPECT_EQ(run(**batched, ps, greedy()), expected);
    report("batched", **batched);
  }
  {
    // SmolLM2: 30 layers, 3 KV heads of 64, f32 KV on the CPU: far fewer blocks than the batch
    // needs force preemption (and the head's pool, sized from the target's, runs short too).
    const int64_t block_bytes = 16 * 2 * 30 * 3 * 64 * 4;
    auto tight = LLM::create(args(true, 6, block_bytes * 16));
    ASSERT_TRUE(tight.ok()) << tight.status().to_string();
    EXPECT_EQ(run(**tight, ps, greedy()), expected);
    EXPECT_GT((*tight)->engine().metrics().num_preemptions.load(), 0);
    report("preempted", **tight);
  }
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
}

TEST_P(EagleE2ETest, SeededSamplingWithNGreaterThanOneMatchesPlain) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.seed = 7;
  sp.max_tokens = 16;
  sp.n = 2;
  std::vector<std::vector<int32_t>> want;
  {
    auto base = LLM::create(args(false, 8));
    ASSERT_TRUE(base.ok());
    want = run(**base, ps, sp);
  }
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  auto spec = LLM::create(args(true, 8));
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(run(**spec, ps, sp), want);
  EXPECT_GT((*spec)->engine().metrics().spec_decode_num_drafts.load(), 0);
}

TEST_P(EagleE2ETest, AHeadForAnotherModelOrNoHeadIsRefusedAtLoad) {
  const std::string dir = head_dir() + "_wide";
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/config.json") << (GetParam() == "eagle3" ? eagle3_config_json(4096) : eagle_config_json(4096));
  EngineArgs ea = args(true, 1);
  ea.speculative.draft_model = dir;
  auto wide = LLM::create(ea);
  std::remove((dir + "/config.json").c_str());
  ::rmdir(dir.c_str());
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("hidden_size 4096 differs from the target's hidden_size 576"), std::string::npos)
      << wide.status().message();
  ea.speculative.draft_model = repo_path(kGguf);  // a model file, not a head directory
  auto file = LLM::create(ea);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("must be an HF directory"), std::string::npos) << file.status().message();
}

INSTANTIATE_TEST_SUITE_P(BothMethods, EagleE2ETest, ::testing::Values("eagle3", "eagle"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kvasir::testing
