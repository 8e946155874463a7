// GrammarCompiler: every spec kind compiles (llama.cpp's GBNF grammars as they are), bad input
// of every kind is a Status naming the problem (never a crash), the cache hands back the same
// object for the same spec (sync, async, in flight, under concurrency) and stays bounded, and a
// compiler shut down with queued work answers every future.
#include "structured/grammar_compiler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "structured/ebnf_text.h"
#include "structured/structured_test_util.h"

namespace kvasir::structured {
namespace {

using Kind = StructuredOutputSpec::Kind;
using testing::make_compiler;
using testing::shared_testdata;
using testing::slurp;
using testing::spec_of;
using testing::tiny_tokenizer;

TEST(GrammarCompiler, CompilesEveryKind) {
  auto c = make_compiler(tiny_tokenizer());
  ASSERT_NE(c, nullptr);
  const StructuredOutputSpec specs[] = {
      spec_of(Kind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"),
      spec_of(Kind::kJsonObject, ""),
      spec_of(Kind::kRegex, "(ab|cd)+[0-9]{2}"),
      spec_of(Kind::kChoice, "", {"yes", "no", "maybe \"so\"", "caf\xC3\xA9", ""}),
      spec_of(Kind::kGrammar, "root ::= \"a\" root | \"b\""),
      spec_of(Kind::kStructuralTag,
              R"({"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<f>"],
                  "tags":[{"type":"tag","begin":"<f>","content":{"type":"json_schema","json_schema":{"type":"object"}},
                  "end":"</f>"}]}})"),
      spec_of(Kind::kStructuralTag,
              R"({"structures":[{"begin":"<f=a>","schema":{"type":"object"},"end":"</f>"}],"triggers":["<f="]})"),
  };
  for (const StructuredOutputSpec& s : specs) {
    CompileResult r = c->compile(s);
    EXPECT_TRUE(r.ok()) << structured_output_kind_name(s.kind) << ": " << r.status().to_string();
  }
}

TEST(GrammarCompiler, LlamaCppGbnfGrammarsCompileAsTheyAre) {
  const std::filesystem::path dir = shared_testdata() + "/grammars";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "shared test data missing";
  auto c = make_compiler(tiny_tokenizer());
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".gbnf") continue;
    ++n;
    CompileResult r = c->compile(spec_of(Kind::kGrammar, slurp(e.path().string())));
    EXPECT_TRUE(r.ok()) << e.path().filename() << ": " << r.status().to_string();
  }
  EXPECT_GE(n, 8);
}

TEST(GrammarCompiler, GbnfEmptyAlternativesAndDotBecomeXGrammarEbnf) {
  EXPECT_EQ(gbnf_to_ebnf("ws ::= | \" \" | \"\\n\" [ \\t]{0,20}"), "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,20}");
  EXPECT_EQ(gbnf_to_ebnf("a ::= \"x\" |\nb ::= (| \"y\" )"), "a ::= \"x\" | \"\"\nb ::= ( \"\"| \"y\" )");
  EXPECT_EQ(gbnf_to_ebnf("a ::=\n"), "a ::= \"\"\n");
  // GBNF's \x takes two digits: "\x41BC" is "ABC".
  EXPECT_EQ(gbnf_to_ebnf("r ::= \"\\x41BC\\\\x41\" [\\x0b-\\x0c]"), "r ::= \"\\u0041BC\\\\x41\" [\\u000b-\\u000c]");
  EXPECT_EQ(gbnf_to_ebnf("root ::= . \"|\" [.|]"), "root ::= [\\u0000-\\U0010FFFF] \"|\" [.|]");
  EXPECT_EQ(choice_ebnf({"a\"b", "c\\d\n\x01"}), "root ::= \"a\\\"b\" | \"c\\\\d\\n\\x01\"\n");
}

void expect_error(GrammarCompiler& c, const StructuredOutputSpec& s, StatusCode code, const std::string& needle) {
  CompileResult r = c.compile(s);
  ASSERT_FALSE(r.ok()) << s.text;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  // No XGrammar source locations leak into messages.
  EXPECT_EQ(r.status().message().find(".cc:"), std::string::npos) << r.status().to_string();
}

TEST(GrammarCompiler, BadInputIsAStatusNamingTheProblem) {
  GrammarCompilerOptions options;
  options.max_spec_bytes = 4096;
  auto c = make_compiler(tiny_tokenizer(), options);
  using SC = StatusCode;
  expect_error(*c, spec_of(Kind::kJsonSchema, "{\"type\": "), SC::kInvalidArgument, "not valid JSON");
  expect_error(*c, spec_of(Kind::kJsonSchema, R"({"type":"strin"})"), SC::kInvalidArgument, "strin");
  expect_error(*c, spec_of(Kind::kJsonSchema, R"({"type":"integer","minimum":5,"maximum":1})"), SC::kInvalidArgument,
               "minimum");
  expect_error(*c, spec_of(Kind::kJsonSchema, R"({"type":"array","uniqueItems":true})"), SC::kUnimplemented,
               "uniqueItems");
  expect_error(*c, spec_of(Kind::kJsonSchema, std::string(5000, ' ') + "{}"), SC::kInvalidArgument, "limit");
  expect_error(*c, spec_of(Kind::kJsonSchema, std::string(300, '[') + std::string(300, ']')), SC::kInvalidArgument,
               "deeper");
  expect_error(*c, spec_of(Kind::kJsonSchema, "{\"type\":\"\xFF\"}"), SC::kInvalidArgument, "UTF-8");
  expect_error(*c, spec_of(Kind::kJsonSchema, R"({"type":"string","pattern":"^\"$"})"), SC::kInvalidArgument,
               "JSON string");
  expect_error(*c, spec_of(Kind::kRegex, "(ab"), SC::kInvalidArgument, "regex");
  expect_error(*c, spec_of(Kind::kRegex, ""), SC::kInvalidArgument, "empty");
  expect_error(*c, spec_of(Kind::kRegex, "a(?=b)"), SC::kUnimplemented, "lookaround");
  expect_error(*c, spec_of(Kind::kGrammar, "root ::= \"a"), SC::kInvalidArgument, "grammar");
  expect_error(*c, spec_of(Kind::kGrammar, "start ::= \"a\""), SC::kInvalidArgument, "root");
  expect_error(*c, spec_of(Kind::kGrammar, "root ::= undefined_rule"), SC::kInvalidArgument, "undefined_rule");
  expect_error(*c, spec_of(Kind::kGrammar, "just text"), SC::kInvalidArgument, "::=");
  expect_error(*c, spec_of(Kind::kGrammar, "root ::= " + std::string(250, '(') + "\"a\"" + std::string(250, ')')),
               SC::kInvalidArgument, "deeper");
  expect_error(*c, spec_of(Kind::kChoice, ""), SC::kInvalidArgument, "at least one");
  expect_error(*c, spec_of(Kind::kChoice, "", {"ok", "\xC3"}), SC::kInvalidArgument, "UTF-8");
  expect_error(*c, spec_of(Kind::kStructuralTag, "[]"), SC::kInvalidArgument, "object");
  expect_error(*c, spec_of(Kind::kStructuralTag, R"({"type":"structural_tag"})"), SC::kInvalidArgument, "format");
  expect_error(*c, spec_of(Kind::kStructuralTag, R"({"type":"structural_tag","format":{"type":"nope"}})"),
               SC::kInvalidArgument, "nope");
  expect_error(
      *c,
      spec_of(
          Kind::kStructuralTag,
          R"({"structures":[{"begin":"<a>","schema":{"type":"array","contains":{}},"end":"</a>"}],"triggers":["<a>"]})"),
      SC::kUnimplemented, "contains");
  expect_error(*c, spec_of(Kind::kStructuralTag, R"x({"format":{"type":"regex","pattern":"a(?!b)"}})x"),
               SC::kUnimplemented, "lookaround");
  expect_error(*c,
               spec_of(Kind::kStructuralTag,
                       R"({"format":{"type":"json_schema","json_schema":{"type":"object"},"style":"qwen_xml"}})"),
               SC::kUnimplemented, "style");
}

TEST(GrammarCompiler, CacheReturnsTheSameObjectSyncAsyncAndForErrors) {
  auto c = make_compiler(tiny_tokenizer());
  auto spec = spec_of(Kind::kRegex, "[a-z]{3}");
  CompileResult a = c->compile(spec);
  ASSERT_TRUE(a.ok());
  CompileResult b = c->compile(spec);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  CompileResult d = c->compile_async(spec).get();
  EXPECT_EQ(a->get(), d->get());
  auto bad = spec_of(Kind::kRegex, "(");
  EXPECT_FALSE(c->compile(bad).ok());
  EXPECT_FALSE(c->compile_async(bad).get().ok());
  auto stats = c->cache_stats();
  EXPECT_EQ(stats.num_entries, 2u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.hits, 3u);
  EXPECT_GT(stats.memory_bytes, 0u);
  // The same text under another kind is another grammar.
  EXPECT_NE(c->compile(spec_of(Kind::kGrammar, "root ::= [a-z]{3}"))->get(), a->get());
}

TEST(GrammarCompiler, CacheIsBoundedByEntries) {
  GrammarCompilerOptions options;
  options.max_cache_entries = 4;
  auto c = make_compiler(tiny_tokenizer(), options);
  CompiledGrammarPtr first = *c->compile(spec_of(Kind::kChoice, "", {"x0"}));
  for (int i = 1; i < 10; ++i) ASSERT_TRUE(c->compile(spec_of(Kind::kChoice, "", {"x" + std::to_string(i)})).ok());
  EXPECT_EQ(c->cache_stats().num_entries, 4u);
  // Evicted: compiled anew (a holder keeps the old one alive).
  CompiledGrammarPtr again = *c->compile(spec_of(Kind::kChoice, "", {"x0"}));
  EXPECT_NE(first.get(), again.get());
}

TEST(GrammarCompiler, ConcurrentCompilesShareOneResultPerSpec) {
  auto c = make_compiler(tiny_tokenizer());
  constexpr int kThreads = 6, kSpecs = 5;
  std::vector<std::vector<const CompiledGrammar*>> seen(kThreads, std::vector<const CompiledGrammar*>(kSpecs));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kSpecs; ++k) {
        int i = (k + t) % kSpecs;
        auto spec = spec_of(Kind::kJsonSchema,
                            R"({"type":"array","items":{"type":"integer","maximum":)" + std::to_string(i * 10) + "}}");
        CompileResult r = t % 2 == 0 ? c->compile(spec) : c->compile_async(spec).get();
        if (!r.ok()) {
          ++failures;
          continue;
        }
        seen[t][i] = r->get();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
}

TEST(GrammarCompiler, ShutdownAnswersEveryQueuedFuture) {
  GrammarCompilerOptions options;
  options.num_threads = 1;
  auto c = make_compiler(tiny_tokenizer(), options);
  std::vector<std::shared_future<CompileResult>> futures;
  for (int i = 0; i < 20; ++i) {
    futures.push_back(c->compile_async(spec_of(Kind::kRegex, "[a-z]{" + std::to_string(i + 1) + "}")));
  }
  c.reset();
  for (auto& f : futures) {
    const CompileResult& r = f.get();
    EXPECT_TRUE(r.ok() || r.status().code() == StatusCode::kUnavailable) << r.status().to_string();
  }
}

TEST(GrammarCompiler, CreateChecksTheVocabularyAndStopTokens) {
  const Tokenizer& tok = tiny_tokenizer();
  const auto n = static_cast<int32_t>(tok.vocab_size());
  EXPECT_EQ(GrammarCompiler::create(tok, n - 1, {2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GrammarCompiler::create(tok, n, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GrammarCompiler::create(tok, n, {n}).status().code(), StatusCode::kInvalidArgument);
  auto ok = GrammarCompiler::create(tok, n + 100, {2, 2, n + 5});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->model_vocab_size(), n + 100);
  EXPECT_EQ((*ok)->tokenizer_vocab_size(), n);
  EXPECT_EQ((*ok)->stop_token_ids(), (std::vector<int32_t>{2, n + 5}));
}

}  // namespace
}  // namespace kvasir::structured
