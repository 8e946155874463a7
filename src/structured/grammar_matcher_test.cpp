// GrammarMatcher: random walks over allowed tokens end in output that the spec accepts (JSON that
// parses and has the schema's shape, a full regex match, one of the choices, a sentence of the
// grammar, tagged JSON inside free text); the bitmask never allows padding or special ids and
// allows a stop token only once the grammar is complete; rollback restores the exact state; a bad
// token id is an answer, not a crash; apply_token_bitmask masks exactly the disallowed logits.
#include "structured/grammar_matcher.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/json.h"
#include "common/utf8.h"
#include "structured/structured_test_util.h"

namespace kvasir::structured {
namespace {

using Kind = StructuredOutputSpec::Kind;
using testing::make_compiler;
using testing::random_walk;
using testing::smollm2;
using testing::spec_of;
using testing::tiny_tokenizer;
using testing::Walk;

// Hand-written matchers (std::regex trips GCC's -Wmaybe-uninitialized under the sanitizers).
bool all_of_class(const std::string& s, size_t begin, size_t end, bool (*in)(char)) {
  if (end > s.size()) return false;
  for (size_t i = begin; i < end; ++i) {
    if (!in(s[i])) return false;
  }
  return true;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_a_to_c(char c) {
  return c >= 'a' && c <= 'c';
}
bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}

// \d{4}-\d{2}-\d{2}
bool is_date_shape(const std::string& s) {
  return s.size() == 10 && all_of_class(s, 0, 4, is_digit) && s[4] == '-' && all_of_class(s, 5, 7, is_digit) &&
         s[7] == '-' && all_of_class(s, 8, 10, is_digit);
}

// (ab|c[de])+-[0-9]{2,4}(\.[a-z]+)?
bool matches_id(const std::string& s) {
  size_t i = 0, units = 0;
  while (i + 1 < s.size() &&
         ((s[i] == 'a' && s[i + 1] == 'b') || (s[i] == 'c' && (s[i + 1] == 'd' || s[i + 1] == 'e')))) {
    i += 2;
    ++units;
  }
  if (units == 0 || i >= s.size() || s[i] != '-') return false;
  size_t digits = 0;
  for (++i; i < s.size() && is_digit(s[i]); ++i) ++digits;
  if (digits < 2 || digits > 4) return false;
  if (i == s.size()) return true;
  return s[i] == '.' && i + 1 < s.size() && all_of_class(s, i + 1, s.size(), is_lower);
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Walks `n` seeds; at least half must terminate, and each terminated output must pass `valid`.
template <typename Valid>
void walk_and_check(const Tokenizer& tok, GrammarCompiler& c, const StructuredOutputSpec& spec, int n, int max_tokens,
                    Valid valid) {
  CompileResult g = c.compile(spec);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  int terminated = 0;
  for (int seed = 0; seed < n; ++seed) {
    Walk w = random_walk(tok, *g, 1000 + seed, max_tokens);
    if (!w.terminated) continue;
    ++terminated;
    EXPECT_TRUE(valid(w.text)) << structured_output_kind_name(spec.kind) << " seed " << seed << " produced: " << w.text;
  }
  EXPECT_GE(terminated, n / 2) << spec.text;
}

TEST(GrammarMatcher, RandomWalksOverAJsonSchemaGiveJsonOfThatShape) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok);
  const std::string schema = R"({"type":"object","properties":{
      "id":{"type":"integer","minimum":-5,"maximum":500},
      "name":{"type":"string","maxLength":6},
      "kind":{"enum":["cat","dog",null]},
      "ok":{"type":"boolean"},
      "tags":{"type":"array","items":{"type":"string","pattern":"^[a-c]{1,3}$"},"maxItems":3},
      "when":{"type":"string","format":"date"}},
    "required":["id","kind","when"],"additionalProperties":false})";
  walk_and_check(tok, *c, spec_of(Kind::kJsonSchema, schema), 24, 600, [](const std::string& text) {
    auto j = parse_json(text);
    if (!j.ok() || !j->is_object()) return false;
    const Json* id = j->find("id");
    const Json* kind = j->find("kind");
    const Json* when = j->find("when");
    if (id == nullptr || !id->is_int() || id->as_int() < -5 || id->as_int() > 500) return false;
    if (kind == nullptr ||
        !(kind->is_null() || (kind->is_string() && (kind->as_string() == "cat" || kind->as_string() == "dog"))))
      return false;
    if (when == nullptr || !when->is_string() || !is_date_shape(when->as_string())) return false;
    if (const Json* name = j->find("name");
        name != nullptr && (!name->is_string() || utf8_length(name->as_string()) > 6))
      return false;
    if (const Json* ok = j->find("ok"); ok != nullptr && !ok->is_bool()) return false;
    if (const Json* tags = j->find("tags")) {
      if (!tags->is_array() || tags->size() > 3) return false;
      for (const Json& t : tags->as_array()) {
        if (!t.is_string() || t.as_string().empty() || t.as_string().size() > 3 ||
            !all_of_class(t.as_string(), 0, t.as_string().size(), is_a_to_c)) {
          return false;
        }
      }
    }
    for (const auto& [key, value] : j->as_object()) {
      if (key != "id" && key != "name" && key != "kind" && key != "ok" && key != "tags" && key != "when") return false;
    }
    return true;
  });
}

TEST(GrammarMatcher, RandomWalksOverJsonObjectGiveAJsonObject) {
  const Tokenizer& tok = tiny_tokenizer();
  GrammarCompilerOptions options;
  options.json_max_whitespace = 2;
  auto c = make_compiler(tok, options);
  walk_and_check(tok, *c, spec_of(Kind::kJsonObject, ""), 16, 400, [](const std::string& text) {
    auto j = parse_json(text);
    // Our parser refuses numbers past double's range (7E01122121251612), which JSON allows.
    if (!j.ok()) return j.status().message().find("number out of range") != std::string::npos;
    return j->is_object();
  });
}

TEST(GrammarMatcher, RandomWalksOverARegexFullMatchIt) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok);
  const std::string re = "(ab|c[de])+-[0-9]{2,4}(\\.[a-z]+)?";
  walk_and_check(tok, *c, spec_of(Kind::kRegex, re), 24, 200,
                 [&](const std::string& text) { return matches_id(text); });
}

TEST(GrammarMatcher, RandomWalksOverChoicesGiveOneOfThem) {
  std::vector<std::string> choices = {"yes", "no", "not sure", "caf\xC3\xA9 \"latte\"", "\xE6\x97\xA5\xE6\x9C\xAC"};
  for (auto tok : {std::shared_ptr<const Tokenizer>(&tiny_tokenizer(), [](const Tokenizer*) {}), smollm2()}) {
    if (!tok) continue;
    auto c = make_compiler(*tok);
    walk_and_check(*tok, *c, spec_of(Kind::kChoice, "", choices), 24, 50, [&](const std::string& text) {
      return std::find(choices.begin(), choices.end(), text) != choices.end();
    });
  }
}

TEST(GrammarMatcher, RandomWalksOverGbnfGiveSentencesOfIt) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok);
  // Balanced parentheses around one x, and an empty GBNF alternative.
  walk_and_check(tok, *c, spec_of(Kind::kGrammar, "root ::= \"(\" root \")\" | \"x\" ws\nws ::= | \" \""), 24, 100,
                 [](const std::string& text) {
                   size_t open = text.find_first_not_of('(');
                   std::string rest = text.substr(open);
                   return rest == "x" + std::string(open, ')') || rest == "x " + std::string(open, ')');
                 });
}

TEST(GrammarMatcher, RandomWalksOverAStructuralTagGiveJsonBetweenTheTags) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok);
  const std::string tag =
      R"({"type":"structural_tag","format":{"type":"sequence","elements":[{"type":"const_string","value":"call:"},
         {"type":"tag","begin":"<f>","content":{"type":"json_schema","json_schema":{"type":"object",
         "properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}},"end":"</f>"}]}})";
  walk_and_check(tok, *c, spec_of(Kind::kStructuralTag, tag), 16, 100, [](const std::string& text) {
    if (text.rfind("call:<f>", 0) != 0 || text.size() < 12 || text.substr(text.size() - 4) != "</f>") return false;
    auto j = parse_json(text.substr(8, text.size() - 12));
    return j.ok() && j->is_object() && j->find("n") != nullptr && j->find("n")->is_int() && j->size() == 1;
  });
}

// On the real vocabularies, the tokens a model would write for a valid output are each allowed by
// the mask before they are accepted, and the stop token at the end.
TEST(GrammarMatcher, RealVocabularyTokensOfValidOutputsAreAllowedStepByStep) {
  const std::vector<std::pair<StructuredOutputSpec, std::string>> cases = {
      {spec_of(Kind::kJsonSchema, R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array",
          "items":{"type":"string","maxLength":12}},"born":{"type":"string","format":"date"},"score":{"type":"number",
          "minimum":0,"maximum":10}},"required":["name","born"],"additionalProperties":false})"),
       "{\"name\": \"Zo\u00eb \\\"Z\\\" M\u00fcller \u65e5\u672c\", \"tags\": [\"a b\", \"caf\u00e9\"], \"born\": "
       "\"2024-02-29\", \"score\": 9.75}"},
      {spec_of(Kind::kRegex, "[A-Z][a-z]+ [0-9]{3}-[0-9]{4}"), "Alice 555-0199"},
      {spec_of(Kind::kGrammar, testing::slurp(testing::shared_testdata() + "/grammars/arithmetic.gbnf")),
       "(a1 +22) *b = 7\n"},
  };
  for (auto tok : {smollm2(), testing::gemma3()}) {
    if (!tok) continue;
    auto c = make_compiler(*tok);
    for (const auto& [spec, text] : cases) {
      if (spec.text.empty()) continue;  // shared grammars missing
      CompileResult g = c->compile(spec);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      GrammarMatcher m(*g);
      std::vector<int32_t> row(bitmask_words(m.model_vocab_size()));
      std::vector<int32_t> ids = tok->encode(text, false);
      ids.push_back(tok->eos_id());
      for (size_t i = 0; i < ids.size(); ++i) {
        m.fill_bitmask(row);
        ASSERT_TRUE(bitmask_allows(row, ids[i])) << text << ": token " << i << " (" << *tok->id_to_token(ids[i]) << ")";
        ASSERT_TRUE(m.accept_token(ids[i]));
      }
      EXPECT_TRUE(m.is_terminated());
    }
  }
}

TEST(GrammarMatcher, BitmaskNeverAllowsPaddingOrSpecialIdsAndStopsOnlyWhenComplete) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok, {}, /*extra_ids=*/45);  // logits wider than the vocabulary
  auto g = c->compile(spec_of(Kind::kChoice, "", {"ab", "abab"}));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  const int32_t vocab = m.model_vocab_size();
  std::vector<int32_t> row(bitmask_words(vocab), -1);
  auto allowed = [&] {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab; ++id) {
      if (bitmask_allows(row, id)) ids.push_back(id);
    }
    return ids;
  };
  EXPECT_TRUE(m.fill_bitmask(row));
  for (int32_t id : allowed()) {
    EXPECT_LT(id, static_cast<int32_t>(tok.vocab_size()));
    EXPECT_FALSE(tok.is_special(id));
    EXPECT_NE(id, tok.eos_id());
  }
  EXPECT_FALSE(m.accept_token(tok.eos_id()));  // not complete yet
  EXPECT_FALSE(m.accept_token(1));             // <s>, special
  EXPECT_FALSE(m.accept_token(vocab - 1));     // padding
  EXPECT_FALSE(m.accept_token(vocab + 7));     // out of range
  EXPECT_FALSE(m.accept_token(-3));
  ASSERT_TRUE(m.accept_token(*tok.token_to_id("ab")));
  EXPECT_TRUE(m.is_completed());
  m.fill_bitmask(row);
  std::vector<int32_t> now = allowed();
  EXPECT_NE(std::find(now.begin(), now.end(), tok.eos_id()), now.end());
  ASSERT_TRUE(m.accept_token(tok.eos_id()));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(*tok.token_to_id("ab")));
  m.fill_bitmask(row);
  EXPECT_EQ(allowed(), std::vector<int32_t>{tok.eos_id()});
}

TEST(GrammarMatcher, RollbackRestoresTheExactState) {
  const Tokenizer& tok = tiny_tokenizer();
  auto c = make_compiler(tok);
  auto g = c->compile(spec_of(Kind::kJsonSchema,
                              R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})"));
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  const std::vector<int32_t> prefix = tok.encode("{\"a\":[1", false);
  for (int32_t id : prefix) ASSERT_TRUE(m.accept_token(id)) << id;
  std::vector<int32_t> before(bitmask_words(m.model_vocab_size())), after(before.size());
  m.fill_bitmask(before);
  const std::vector<int32_t> more = tok.encode(",2,3]", false);
  for (int32_t id : more) ASSERT_TRUE(m.accept_token(id));
  EXPECT_EQ(m.num_accepted_steps(), static_cast<int32_t>(prefix.size() + more.size()));
  m.rollback(static_cast<int32_t>(more.size()));
  m.fill_bitmask(after);
  EXPECT_EQ(before, after);
  m.reset();
  EXPECT_EQ(m.num_accepted_steps(), 0);
  EXPECT_FALSE(m.accept_token(*tok.token_to_id("]")));
}

TEST(GrammarMatcher, AcceptStringFollowsTheGrammar) {
  auto c = make_compiler(tiny_tokenizer());
  auto g = c->compile(spec_of(Kind::kRegex, "[0-9]+(\\.[0-9]+)?"));
  GrammarMatcher m(*g);
  EXPECT_TRUE(m.accept_string("12"));
  EXPECT_FALSE(m.accept_string("x"));
  EXPECT_TRUE(m.accept_string(".5"));
  EXPECT_TRUE(m.is_completed());
}

TEST(TokenBitmask, ApplyMasksExactlyTheDisallowedLogits) {
  const int32_t vocab = 70;  // three words, the last one partial
  std::vector<int32_t> row(bitmask_words(vocab), -1);
  auto disallow = [&](int32_t id) { row[id / 32] &= ~static_cast<int32_t>(1u << (id % 32)); };
  for (int32_t id : {0, 31, 33, 64, 69}) disallow(id);
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i);
  apply_token_bitmask(row, logits);
  for (int32_t i = 0; i < vocab; ++i) {
    bool banned = i == 0 || i == 31 || i == 33 || i == 64 || i == 69;
    if (banned) {
      EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
    } else {
      EXPECT_EQ(logits[i], static_cast<float>(i)) << i;
    }
  }
}

}  // namespace
}  // namespace kvasir::structured
