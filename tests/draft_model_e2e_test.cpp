// Speculative method "draft_model" end to end on the real SmolLM2 (CPU): greedy tokens equal plain
// decoding token for token with the same GGUF as its own draft and with the Q4_1 GGUF drafting for
// the f32 HF directory, one at a time, batched and under forced preemption (the draft's cache is
// dropped and caught up again); seeded sampling with n > 1 matches plain; a draft with another
// vocabulary (Gemma 3) is refused at load, naming what differs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/json.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "setup/loaded_model.h"

namespace kvasir::testing {
namespace {

const char* kGguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const char* kHfF32 = "models/smollm2-hf";
const char* kGemma = "models/gemma-3-270m-q4_k_m.gguf";

// The first committed test prompts (bounded time) plus two input-grounded ones.
std::vector<PromptInput> prompts() {
  std::vector<PromptInput> out;
  auto text = read_text_file(repo_path("tests/data/prompts/prompts.json"));
  if (text.ok()) {
    auto j = parse_json(*text);
    if (j.ok()) {
      for (const Json& p : j->find("prompts")->as_array()) {
        std::string t = p.get_string("text");
        if (!t.empty() && t.size() <= 600 && out.size() < 6) out.push_back(PromptInput{t, {}, std::nullopt});
      }
    }
  }
  for (const char* t : {"Repeat exactly: \"The quick brown fox jumps over the lazy dog.\"\nRepeat:",
                        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"}) {
    out.push_back(PromptInput{t, {}, std::nullopt});
  }
  return out;
}

class DraftModelE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(repo_path(kGguf)) || !file_exists(repo_path(std::string(kHfF32) + "/config.json"))) {
      GTEST_SKIP() << "models missing: run scripts/setup.sh";
    }
  }
  static EngineArgs args(const char* target, const char* draft, int max_num_seqs = 8,
                         int64_t kv_bytes = int64_t{64} << 20) {
    EngineArgs ea;
    ea.model = repo_path(target);
    ea.max_num_seqs = max_num_seqs;
    ea.max_num_batched_tokens = 256;  // prompts longer than this are caught up by the draft in chunks
    ea.kv_cache_memory = kv_bytes;
    if (draft != nullptr) {
      ea.speculative.method = "draft_model";
      ea.speculative.draft_model = repo_path(draft);
      ea.speculative.num_speculative_tokens = 3;
    }
    return ea;
  }
  static std::vector<GenerationResult> run(LLM& llm, const std::vector<PromptInput>& p, const SamplingParams& sp) {
    auto res = llm.generate(p, sp);
    EXPECT_TRUE(res.ok());
    for (const auto& r : *res) EXPECT_TRUE(r.error.empty()) << r.error;
    return res.ok() ? *res : std::vector<GenerationResult>{};
  }
  static std::vector<std::vector<int32_t>> tokens_of(const std::vector<GenerationResult>& res) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : res) {
      for (const auto& c : r.outputs) out.push_back(c.token_ids);
    }
    return out;
  }
  static SamplingParams greedy() {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 20;
    sp.ignore_eos = true;
    return sp;
  }
  static void report(const char* what, LLM& llm) {
    const EngineMetrics& m = llm.engine().metrics();
    std::printf("[ metrics ] %s: %lld drafts, %lld draft tokens, %lld accepted, mean acceptance length %.2f\n", what,
                static_cast<long long>(m.spec_decode_num_drafts.load()),
                static_cast<long long>(m.spec_decode_num_draft_tokens.load()),
                static_cast<long long>(m.spec_decode_num_accepted_tokens.load()), m.spec_decode_mean_acceptance_length());
    EXPECT_GT(m.spec_decode_num_accepted_tokens.load(), 0) << what << ": no draft was ever accepted";
  }
  // Plain greedy tokens of `target`, one prompt at a time.
  static std::vector<std::vector<int32_t>> plain(const char* target, const std::vector<PromptInput>& ps) {
    auto llm = LLM::create(args(target, nullptr, 1));
    EXPECT_TRUE(llm.ok()) << llm.status().to_string();
    std::vector<std::vector<int32_t>> out;
    if (!llm.ok()) return out;
    for (const auto& p : ps) out.push_back(tokens_of(run(**llm, {p}, greedy()))[0]);
    return out;
  }
};

TEST_F(DraftModelE2ETest, SameGgufAsDraftEqualsPlainOneAtATimeBatchedAndUnderPreemption) {
  const auto ps = prompts();
  const auto expected = plain(kGguf, ps);
  {
    auto solo = LLM::create(args(kGguf, kGguf, 1));
    ASSERT_TRUE(solo.ok()) << solo.status().to_string();
    std::vector<std::vector<int32_t>> got;
    for (const auto& p : ps) got.push_back(tokens_of(run(**solo, {p}, greedy()))[0]);
    EXPECT_EQ(got, expected);
    report("same GGUF, one at a time", **solo);
  }
  // Batched steps verify every draft: the adaptive budget would verify few at these batch sizes.
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  {
    auto batched = LLM::create(args(kGguf, kGguf, 16));
    ASSERT_TRUE(batched.ok());
    EXPECT_EQ(tokens_of(run(**batched, ps, greedy())), expected);
    report("same GGUF, batched", **batched);
  }
  {
    auto probe = load_tokenizer_only(repo_path(kGguf));
    ASSERT_TRUE(probe.ok());
    const ModelConfig& c = (*probe)->config;
    const int64_t block_bytes = 16 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4;
    // Far fewer target blocks than the batch needs force preemption; the draft's pool is sized
    // from the target's, so it runs short too and some steps propose nothing for some requests.
    auto tight = LLM::create(args(kGguf, kGguf, 8, block_bytes * 24));
    ASSERT_TRUE(tight.ok()) << tight.status().to_string();
    EXPECT_EQ(tokens_of(run(**tight, ps, greedy())), expected);
    EXPECT_GT((*tight)->engine().metrics().num_preemptions.load(), 0);
    report("same GGUF, preempted", **tight);
  }
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
}

TEST_F(DraftModelE2ETest, Q41GgufDraftingForF32HfDirectoryEqualsPlain) {
  const auto ps = prompts();
  const auto expected = plain(kHfF32, ps);
  {
    auto solo = LLM::create(args(kHfF32, kGguf, 1));
    ASSERT_TRUE(solo.ok()) << solo.status().to_string();
    std::vector<std::vector<int32_t>> got;
    for (const auto& p : ps) got.push_back(tokens_of(run(**solo, {p}, greedy()))[0]);
    EXPECT_EQ(got, expected);
    report("Q4_1 for f32, one at a time", **solo);
  }
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  auto batched = LLM::create(args(kHfF32, kGguf, 16));
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ(tokens_of(run(**batched, ps, greedy())), expected);
  report("Q4_1 for f32, batched", **batched);
}

TEST_F(DraftModelE2ETest, SeededSamplingWithNGreaterThanOneMatchesPlain) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.seed = 7;
  sp.max_tokens = 16;
  sp.n = 2;
  auto base = LLM::create(args(kGguf, nullptr, 8));
  ASSERT_TRUE(base.ok());
  const auto want = tokens_of(run(**base, ps, sp));
  base->reset();
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  auto spec = LLM::create(args(kGguf, kGguf, 8));
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(tokens_of(run(**spec, ps, sp)), want);
  EXPECT_GT((*spec)->engine().metrics().spec_decode_num_drafts.load(), 0);
}

TEST_F(DraftModelE2ETest, DraftWithAnotherVocabularyIsRefusedAtLoad) {
  if (!file_exists(repo_path(kGemma))) GTEST_SKIP() << "gemma model missing";
  auto refused = LLM::create(args(kGguf, kGemma, 1));
  ASSERT_FALSE(refused.ok());
  const std::string m = refused.status().message();
  EXPECT_NE(m.find("does not share the target's vocabulary"), std::string::npos) << m;
  EXPECT_NE(m.find("vocab_size"), std::string::npos) << m;
  EngineArgs missing = args(kGguf, "models/no-such-draft.gguf", 1);
  auto not_found = LLM::create(missing);
  ASSERT_FALSE(not_found.ok());
  EXPECT_NE(not_found.status().message().find("loading the draft model"), std::string::npos)
      << not_found.status().message();
}

}  // namespace
}  // namespace kvasir::testing
