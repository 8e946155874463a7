// Grammar-constrained generation end to end on SmolLM2 (CPU): JSON schema, JSON object, regex and
// choice outputs are valid when the model stops; a grammar row leaves unconstrained rows of the
// same batch untouched; seeded constrained outputs are the same with async scheduling and under
// preemption (the matcher state survives recompute); bare integer and number schemas end within
// 16 digits; a schema that cannot compile fails only its own request.
#include <gtest/gtest.h>

#include <regex>

#include "common/json.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"
#include "setup/loaded_model.h"

namespace kvasir::testing {
namespace {

const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
using Kind = StructuredOutputSpec::Kind;

StructuredOutputSpec spec(Kind kind, std::string text = {}, std::vector<std::string> choices = {}) {
  StructuredOutputSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pet": {"enum": ["cat", "dog"]}}, "required": ["name", "age", "pet"], "additionalProperties": false})";

bool valid_person(const std::string& text) {
  auto j = parse_json(text);
  if (!j.ok() || !j->is_object() || j->size() != 3) return false;
  const Json* name = j->find("name");
  const Json* age = j->find("age");
  const Json* pet = j->find("pet");
  return name && name->is_string() && name->as_string().size() <= 12 && age && age->is_int() &&
         age->as_int() >= 0 && age->as_int() <= 120 && pet && pet->is_string() &&
         (pet->as_string() == "cat" || pet->as_string() == "dog");
}

class StructuredE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(repo_path(kModel))) GTEST_SKIP() << "model missing: run scripts/setup.sh";
  }
  static EngineArgs args(int64_t kv_bytes = int64_t{128} << 20, bool async = false) {
    EngineArgs ea;
    ea.model = repo_path(kModel);
    ea.max_num_seqs = 16;
    ea.max_num_batched_tokens = 512;
    ea.kv_cache_memory = kv_bytes;
    ea.async_scheduling = async;
    return ea;
  }
  static std::vector<PromptInput> prompts(const SamplingParams& sp, int count) {
    const char* texts[] = {"Describe a person as JSON:", "A user record:", "Output:", "Here is some data",
                           "The answer is", "Write a poem", "List three fruits", "Hello"};
    std::vector<PromptInput> v;
    for (int i = 0; i < count; ++i) v.push_back(PromptInput{texts[i % 8], {}, sp});
    return v;
  }
};

TEST_F(StructuredE2ETest, EveryKindConstrainsTheOutput) {
  auto llm = LLM::create(args());
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  struct Case {
    StructuredOutputSpec spec;
    std::function<bool(const std::string&)> valid;
  };
  const std::regex re("[0-9]{3}-[a-z]{2,4}");
  std::vector<Case> cases = {
      {spec(Kind::kJsonSchema, kPersonSchema), valid_person},
      {spec(Kind::kJsonObject), [](const std::string& t) { auto j = parse_json(t); return j.ok() && j->is_object(); }},
      {spec(Kind::kRegex, "[0-9]{3}-[a-z]{2,4}"), [&](const std::string& t) { return std::regex_match(t, re); }},
      {spec(Kind::kChoice, {}, {"red", "green", "blue"}),
       [](const std::string& t) { return t == "red" || t == "green" || t == "blue"; }},
      {spec(Kind::kGrammar, R"g(root ::= "(" [a-c]+ ")" ("!" | "?"))g"),
       [](const std::string& t) { return std::regex_match(t, std::regex(R"(\([a-c]+\)[!?])")); }},
  };
  for (const Case& c : cases) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 7;
    sp.n = 4;
    sp.max_tokens = 160;
    sp.structured_outputs = c.spec;
    auto res = (*llm)->generate(prompts(sp, 6), SamplingParams{});
    ASSERT_TRUE(res.ok());
    int stopped = 0, total = 0;
    for (const auto& r : *res) {
      ASSERT_TRUE(r.error.empty()) << r.error;
      for (const auto& o : r.outputs) {
        ++total;
        if (o.finish_reason != "stop") continue;  // cut by max_tokens: a prefix of a valid output
        ++stopped;
        EXPECT_TRUE(c.valid(o.text)) << structured_output_kind_name(c.spec.kind) << ": " << o.text;
      }
    }
    std::printf("[ metrics ] %s: %d of %d samples ended by the grammar\n", structured_output_kind_name(c.spec.kind),
                stopped, total);
    EXPECT_GE(stopped, total * 3 / 4) << structured_output_kind_name(c.spec.kind);
  }
}

TEST_F(StructuredE2ETest, UnconstrainedRowsAreUntouchedByGrammarRows) {
  SamplingParams free_sp;
  free_sp.temperature = 0.8f;
  free_sp.seed = 3;
  free_sp.max_tokens = 20;
  free_sp.ignore_eos = true;
  SamplingParams json_sp = free_sp;
  json_sp.structured_outputs = spec(Kind::kJsonObject);
  json_sp.ignore_eos = false;
  auto free_only = prompts(free_sp, 6);
  std::vector<PromptInput> mixed;
  for (size_t i = 0; i < free_only.size(); ++i) {
    mixed.push_back(free_only[i]);
    mixed.push_back(PromptInput{"JSON:", {}, json_sp});
  }
  auto llm = LLM::create(args());
  ASSERT_TRUE(llm.ok());
  auto a = (*llm)->generate(free_only, SamplingParams{});
  auto b = (*llm)->generate(mixed, SamplingParams{});
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].outputs[0].token_ids, (*b)[2 * i].outputs[0].token_ids) << i;
  }
}

TEST_F(StructuredE2ETest, SameOutputsWithAsyncSchedulingAndUnderPreemption) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 21;
  sp.n = 2;
  sp.max_tokens = 48;
  sp.structured_outputs = spec(Kind::kJsonSchema, kPersonSchema);
  const auto in = prompts(sp, 16);
  auto probe = load_tokenizer_only(repo_path(kModel));
  ASSERT_TRUE(probe.ok());
  const ModelConfig& c = (*probe)->config;
  const int64_t block_bytes = 16 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4;
  auto generate = [&](bool async, int64_t kv_bytes, int64_t* preemptions) {
    auto llm = LLM::create(args(kv_bytes, async));
    EXPECT_TRUE(llm.ok());
    auto res = (*llm)->generate(in, SamplingParams{});
    EXPECT_TRUE(res.ok());
    *preemptions = (*llm)->engine().metrics().num_preemptions.load();
    return *res;
  };
  int64_t p0 = 0, p1 = 0, p2 = 0;
  const auto sync = generate(false, int64_t{128} << 20, &p0);
  const auto async = generate(true, int64_t{128} << 20, &p1);
  const auto tight = generate(false, block_bytes * 24, &p2);
  std::printf("[ metrics ] constrained run with a 24-block KV cache: %lld preemptions\n", static_cast<long long>(p2));
  EXPECT_GT(p2, 0);
  for (const auto* other : {&async, &tight}) {
    ASSERT_EQ(other->size(), sync.size());
    for (size_t i = 0; i < sync.size(); ++i) {
      ASSERT_TRUE((*other)[i].error.empty()) << (*other)[i].error;
      for (size_t k = 0; k < sync[i].outputs.size(); ++k) {
        EXPECT_EQ(sync[i].outputs[k].token_ids, (*other)[i].outputs[k].token_ids) << i << "/" << k;
      }
    }
  }
}

// Small enough for the sanitizer stages: the masks of an async step are filled only after the
// fold of the step before (the matcher must have accepted its token), on the manager's thread.
TEST_F(StructuredE2ETest, AsyncMasksWaitForTheFold) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 4;
  sp.max_tokens = 24;
  sp.structured_outputs = spec(Kind::kRegex, "[a-z]{3,40}");
  const auto in = prompts(sp, 4);
  std::vector<std::vector<int32_t>> out[2];
  for (int async = 0; async < 2; ++async) {
    auto llm = LLM::create(args(int64_t{64} << 20, async == 1));
    ASSERT_TRUE(llm.ok());
    auto res = (*llm)->generate(in, SamplingParams{});
    ASSERT_TRUE(res.ok());
    for (const auto& r : *res) {
      ASSERT_TRUE(r.error.empty()) << r.error;
      out[async].push_back(r.outputs[0].token_ids);
      const std::string& t = r.outputs[0].text;
      EXPECT_TRUE(std::regex_match(t, std::regex("[a-z]{3,40}")) ||
                  (r.outputs[0].finish_reason == "length" && std::regex_match(t, std::regex("[a-z]*"))))
          << t;
    }
  }
  EXPECT_EQ(out[0], out[1]);
}

// A reasoning parser's end marker gates the grammar: tokens before it are free, the grammar
// applies from the first token after it, and a prompt that already holds it constrains at once.
TEST_F(StructuredE2ETest, GrammarStartsAfterTheEndOfReasoning) {
  auto llm = LLM::create(args());
  ASSERT_TRUE(llm.ok());
  Engine& engine = (*llm)->engine();
  const Tokenizer& tok = *(*llm)->model().tokenizer;
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  sp.structured_outputs = spec(Kind::kRegex, "[0-9]{12}");
  auto run = [&](const std::string& id, const std::string& prompt, const std::string& marker) {
    AddRequestOptions opts;
    opts.grammar_starts_after = tok.encode(marker, false);
    auto stream = engine.add_request(id, tok.encode(prompt, true), sp, opts);
    EXPECT_TRUE(stream.ok());
    std::string text;
    RequestOutput d;
    while (stream.ok() && (*stream)->next(&d)) text += d.text;
    return text;
  };
  // The marker is in the prompt: digits from the first token.
  // (At the prompt's start "</think>" tokenizes as on its own; reasoning models have one special token.)
  const std::string closed = run("closed", "</think> The number:", "</think>");
  EXPECT_TRUE(std::regex_match(closed, std::regex("[0-9]{1,12}"))) << closed;
  // The marker never comes: the greedy model writes its own words, unconstrained.
  const std::string open = run("open", "Write a sentence about cats.", "</think>");
  EXPECT_FALSE(std::regex_match(open, std::regex("[0-9]*"))) << open;
}

// A bare integer or number schema lets greedy SmolLM2 write digits until max_tokens unless the
// grammar bounds them (json_schema_policy.cpp: ±(2^53-1), at most 16 integer digits).
TEST_F(StructuredE2ETest, BareIntegerAndNumberSchemasEndWithinSixteenDigits) {
  auto llm = LLM::create(args());
  ASSERT_TRUE(llm.ok());
  for (const char* schema : {R"({"type": "integer"})", R"({"type": "number"})"}) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 64;
    sp.structured_outputs = spec(Kind::kJsonSchema, schema);
    auto res = (*llm)->generate(prompts(sp, 8), SamplingParams{});
    ASSERT_TRUE(res.ok());
    for (const auto& r : *res) {
      ASSERT_TRUE(r.error.empty()) << r.error;
      const auto& o = r.outputs[0];
      EXPECT_EQ(o.finish_reason, "stop") << schema << ": " << o.text;
      auto j = parse_json(o.text);
      ASSERT_TRUE(j.ok() && j->is_number()) << schema << ": " << o.text;
      size_t int_digits = 0;
      for (char c : o.text) {
        if (c == '.' || c == 'e' || c == 'E') break;
        if (c >= '0' && c <= '9') ++int_digits;
      }
      EXPECT_LE(int_digits, 16u) << schema << ": " << o.text;
    }
  }
}

TEST_F(StructuredE2ETest, BadGrammarFailsOnlyItsRequest) {
  auto llm = LLM::create(args());
  ASSERT_TRUE(llm.ok());
  SamplingParams good;
  good.temperature = 0;
  good.max_tokens = 8;
  good.structured_outputs = spec(Kind::kChoice, {}, {"yes", "no"});
  for (const auto& bad : {spec(Kind::kRegex, "([a-z]"), spec(Kind::kJsonSchema, R"({"type": "array", "uniqueItems": true})"),
                          spec(Kind::kGrammar, "root ::= missing_rule"), spec(Kind::kJsonSchema, "{not json")}) {
    SamplingParams sp = good;
    sp.structured_outputs = bad;
    auto r = (*llm)->engine().add_request("bad", {1, 2, 3}, sp);
    EXPECT_FALSE(r.ok()) << bad.text;
    if (!r.ok()) {
      EXPECT_TRUE(r.status().code() == StatusCode::kInvalidArgument || r.status().code() == StatusCode::kUnimplemented);
      std::printf("[ error ] %s\n", r.status().message().c_str());
    }
    auto ok = (*llm)->generate(prompts(good, 1), SamplingParams{});
    ASSERT_TRUE(ok.ok());
    ASSERT_TRUE((*ok)[0].error.empty());
    const std::string& t = (*ok)[0].outputs[0].text;
    EXPECT_TRUE(t == "yes" || t == "no") << t;
  }
}

}  // namespace
}  // namespace kvasir::testing
