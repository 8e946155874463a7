// Speculative decoding end to end on the real SmolLM2 model (CPU), ngram proposer: greedy tokens
// equal plain decoding token for token, one at a time, batched and under forced preemption;
// seeded sampling (top-p, penalties, min_tokens, logit bias), logprobs, prompt logprobs, n > 1
// and stop strings give what plain decoding gives (verification samples each position exactly as
// a plain step would, with the same random draw); the drafts are really accepted; grammar-
// constrained outputs verify drafts under the grammar and equal plain constrained decoding.
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

const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// The committed test prompts plus input-grounded ones (copying, editing), where drafts hit.
std::vector<PromptInput> prompts() {
  std::vector<PromptInput> out;
  auto text = read_text_file(repo_path("tests/data/prompts/prompts.json"));
  if (text.ok()) {
    auto j = parse_json(*text);
    if (j.ok()) {
      for (const Json& p : j->find("prompts")->as_array()) {
        std::string t = p.get_string("text");
        if (!t.empty() && t.size() <= 1500) out.push_back(PromptInput{t, {}, std::nullopt});
      }
    }
  }
  for (const char* t : {
           "Repeat exactly: \"The quick brown fox jumps over the lazy dog. A stitch in time saves nine.\"\nRepeat:",
           "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n# The same functions, renamed:\ndef plus(a, b):",
           "Quote the first sentence: Water boils at 100 degrees Celsius at sea level. It freezes at zero.\nQuote:",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"}) {
    out.push_back(PromptInput{t, {}, std::nullopt});
  }
  return out;
}

class SpecDecodeE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(repo_path(kModel))) GTEST_SKIP() << "model missing: run scripts/setup.sh";
  }
  static EngineArgs args(bool spec, int max_num_seqs = 16, int64_t kv_bytes = int64_t{128} << 20) {
    EngineArgs ea;
    ea.model = repo_path(kModel);
    ea.max_num_seqs = max_num_seqs;
    ea.max_num_batched_tokens = 512;
    ea.kv_cache_memory = kv_bytes;
    if (spec) {
      ea.speculative.method = "ngram";
      ea.speculative.num_speculative_tokens = 4;
      ea.speculative.prompt_lookup_min = 2;
      ea.speculative.prompt_lookup_max = 4;
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
};

TEST_F(SpecDecodeE2ETest, GreedyEqualsPlainOneAtATimeBatchedAndUnderPreemption) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 32;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> expected;
  {
    auto plain = LLM::create(args(false, 1));
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    for (const auto& p : ps) expected.push_back(tokens_of(run(**plain, {p}, sp))[0]);
  }
  {
    auto solo = LLM::create(args(true, 1));
    ASSERT_TRUE(solo.ok());
    std::vector<std::vector<int32_t>> got;
    for (const auto& p : ps) got.push_back(tokens_of(run(**solo, {p}, sp))[0]);
    EXPECT_EQ(got, expected);
    const EngineMetrics& m = (*solo)->engine().metrics();
    std::printf("[ metrics ] one at a time: %lld drafts, %lld draft tokens, %lld accepted, mean acceptance length %.2f\n",
                static_cast<long long>(m.spec_decode_num_drafts.load()),
                static_cast<long long>(m.spec_decode_num_draft_tokens.load()),
                static_cast<long long>(m.spec_decode_num_accepted_tokens.load()), m.spec_decode_mean_acceptance_length());
    EXPECT_GT(m.spec_decode_num_accepted_tokens.load(), 0) << "no draft was ever accepted: nothing was tested";
  }
  // Batched steps verify every draft: the adaptive budget would verify few at these batch sizes.
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  {
    auto batched = LLM::create(args(true, 32));
    ASSERT_TRUE(batched.ok());
    EXPECT_EQ(tokens_of(run(**batched, ps, sp)), expected);
    EXPECT_GT((*batched)->engine().metrics().spec_decode_num_accepted_tokens.load(), 0);
  }
  {
    auto probe = load_tokenizer_only(repo_path(kModel));
    ASSERT_TRUE(probe.ok());
    const ModelConfig& c = (*probe)->config;
    const int64_t block_bytes = 16 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4;
    // Small batches keep drafting on; far fewer blocks than the requests need force preemption.
    auto tight = LLM::create(args(true, 8, block_bytes * 48));
    ASSERT_TRUE(tight.ok());
    EXPECT_EQ(tokens_of(run(**tight, ps, sp)), expected);
    EXPECT_GT((*tight)->engine().metrics().num_preemptions.load(), 0);
    EXPECT_GT((*tight)->engine().metrics().spec_decode_num_drafts.load(), 0);
  }
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
}

TEST_F(SpecDecodeE2ETest, SampledOutputsLogprobsAndNMatchPlain) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.top_k = 40;
  sp.seed = 11;
  sp.max_tokens = 24;
  sp.logprobs = 3;
  sp.prompt_logprobs = 2;
  sp.presence_penalty = 0.3f;
  sp.frequency_penalty = 0.2f;
  sp.repetition_penalty = 1.1f;
  sp.min_tokens = 6;
  sp.logit_bias = {{13, -2.0f}};
  sp.n = 2;
  auto plain = LLM::create(args(false, 8));
  ASSERT_TRUE(plain.ok());
  const auto want = run(**plain, ps, sp);
  plain->reset();
  setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
  auto spec = LLM::create(args(true, 8));
  unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
  ASSERT_TRUE(spec.ok());
  const auto got = run(**spec, ps, sp);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].outputs.size(), 2u);
    EXPECT_EQ(got[i].prompt_logprobs.size(), want[i].prompt_logprobs.size());
    for (size_t k = 0; k < 2; ++k) {
      const auto& g = got[i].outputs[k];
      const auto& w = want[i].outputs[k];
      EXPECT_EQ(g.token_ids, w.token_ids) << "prompt " << i << " choice " << k;
      EXPECT_EQ(g.text, w.text);
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
      for (size_t t = 0; t < g.logprobs.size(); ++t) {
        EXPECT_EQ(g.logprobs[t].chosen.token_id, w.logprobs[t].chosen.token_id);
        EXPECT_NEAR(g.logprobs[t].chosen.logprob, w.logprobs[t].chosen.logprob, 1e-4f);
      }
    }
  }
  EXPECT_GT((*spec)->engine().metrics().spec_decode_num_drafts.load(), 0);
}

TEST_F(SpecDecodeE2ETest, StopStringsAndStopTokensInsideAcceptedRuns) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 40;
  auto plain = LLM::create(args(false, 8));
  ASSERT_TRUE(plain.ok());
  const auto base = run(**plain, ps, sp);
  // A stop string and a stop token from the middle of each greedy text: both land inside
  // accepted runs whenever the run copies, and must end the output exactly where plain does.
  std::vector<PromptInput> stopped;
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto& o = base[i].outputs[0];
    SamplingParams s = sp;
    if (o.text.size() >= 12) s.stop = {o.text.substr(o.text.size() / 2, 4)};
    if (o.token_ids.size() >= 10) s.stop_token_ids = {o.token_ids[o.token_ids.size() * 2 / 3]};
    stopped.push_back(PromptInput{ps[i].text, {}, s});
  }
  const auto want = run(**plain, stopped, sp);
  plain->reset();
  auto spec = LLM::create(args(true, 8));
  ASSERT_TRUE(spec.ok());
  const auto got = run(**spec, stopped, sp);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].outputs[0].token_ids, want[i].outputs[0].token_ids) << i;
    EXPECT_EQ(got[i].outputs[0].text, want[i].outputs[0].text) << i;
    EXPECT_EQ(got[i].outputs[0].finish_reason, want[i].outputs[0].finish_reason) << i;
  }
}

TEST_F(SpecDecodeE2ETest, AsyncSchedulingIsRefusedWithSpeculation) {
  EngineArgs ea = args(true);
  ea.async_scheduling = true;
  auto refused = LLM::create(ea);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--async-scheduling"), std::string::npos);
}

// Grammar-constrained requests verify drafts under a mask per draft position (the grammar's state
// after the drafts before it): greedy and seeded sampled outputs equal plain constrained decoding,
// the drafts that copy the prompt into the JSON are accepted, and every output obeys its grammar.
TEST_F(SpecDecodeE2ETest, StructuredOutputsVerifyDraftsUnderTheGrammar) {
  const std::string text =
      "Alice Johnson lives in Paris and works as a baker. She said: \"the quick brown fox jumps over the lazy "
      "dog\". Her phone number is 555-1234.";
  auto constrained = [&](StructuredOutputSpec::Kind kind, std::string payload, std::vector<std::string> choices,
                         const std::string& ask, float temperature) {
    SamplingParams sp;
    sp.temperature = temperature;
    sp.top_p = 0.9f;
    sp.seed = 7;
    sp.max_tokens = 64;
    sp.structured_outputs = StructuredOutputSpec{};
    sp.structured_outputs->kind = kind;
    sp.structured_outputs->text = std::move(payload);
    sp.structured_outputs->choices = std::move(choices);
    return PromptInput{"Text: " + text + "\n" + ask, {}, sp};
  };
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"city":{"type":"string"},)"
      R"("quote":{"type":"string"}},"required":["name","city","quote"],"additionalProperties":false})";
  using K = StructuredOutputSpec::Kind;
  std::vector<PromptInput> ps;
  for (float t : {0.0f, 0.8f}) {
    ps.push_back(constrained(K::kJsonSchema, schema, {}, "Her name, city and quote as JSON:", t));
    ps.push_back(constrained(K::kRegex, "[0-9]{3}-[0-9]{4}", {}, "Her phone number:", t));
    ps.push_back(constrained(K::kChoice, "", {"Paris", "London", "Berlin"}, "Her city:", t));
    ps.push_back(constrained(K::kJsonObject, "", {}, "Everything about her as a JSON object:", t));
  }
  SamplingParams unused;
  auto plain = LLM::create(args(false, 8));
  ASSERT_TRUE(plain.ok());
  const auto want = run(**plain, ps, unused);
  plain->reset();
  for (const bool verify_all : {false, true}) {
    if (verify_all) setenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS", "1", 1);
    auto spec = LLM::create(args(true, verify_all ? 8 : 1));
    unsetenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS");
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    const auto got = run(**spec, ps, unused);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].outputs[0].token_ids, want[i].outputs[0].token_ids) << "prompt " << i << ": " << got[i].outputs[0].text;
      EXPECT_EQ(got[i].outputs[0].text, want[i].outputs[0].text);
    }
    const EngineMetrics& m = (*spec)->engine().metrics();
    std::printf("[ metrics ] constrained, %s: %lld drafts, %lld draft tokens, %lld accepted\n",
                verify_all ? "batched, every draft verified" : "one at a time",
                static_cast<long long>(m.spec_decode_num_drafts.load()),
                static_cast<long long>(m.spec_decode_num_draft_tokens.load()),
                static_cast<long long>(m.spec_decode_num_accepted_tokens.load()));
    EXPECT_GT(m.spec_decode_num_accepted_tokens.load(), 0) << "no draft was accepted under a grammar: nothing was tested";
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& out = want[i].outputs[0].text;
    switch (i % 4) {
      case 0: {
        auto j = parse_json(out);
        ASSERT_TRUE(j.ok()) << out;
        EXPECT_NE(j->find("name"), nullptr) << out;
        EXPECT_NE(j->find("quote"), nullptr) << out;
        break;
      }
      case 1:
        EXPECT_EQ(out.size(), 8u) << out;
        EXPECT_EQ(out[3], '-') << out;
        break;
      case 2:
        EXPECT_TRUE(out == "Paris" || out == "London" || out == "Berlin") << out;
        break;
      default:
        EXPECT_TRUE(parse_json(out).ok()) << out;
    }
  }
}

}  // namespace
}  // namespace kvasir::testing
