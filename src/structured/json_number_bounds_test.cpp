// Integers and numbers of a JSON schema have a bounded number of digits: the keyword policy gives
// the sides a schema leaves open ±(2^53-1), so a model cannot write digits until max_tokens. Only
// a narrowing: bounds the schema sets, multipleOf and out-of-range one-sided schemas keep their
// meaning.
#include <gtest/gtest.h>

#include <string>

#include "structured/json_schema_policy.h"
#include "structured/structured_test_util.h"

namespace kvasir::structured {
namespace {

constexpr const char* kMaxSafe = "9007199254740991";  // 2^53 - 1: 16 digits

// The schema XGrammar is given after the policy's edits.
std::string edited(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok()) << text;
  SchemaEdits edits;
  Status s = check_json_schema(*j, JsonSchemaPolicyOptions(), &edits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dump_with_edits(*j, edits);
}

class JsonNumberBounds : public ::testing::Test {
 protected:
  CompiledGrammarPtr compile(const std::string& schema) {
    static const auto compiler = testing::make_compiler(testing::tiny_tokenizer());
    CompileResult r = compiler->compile(testing::spec_of(StructuredOutputSpec::Kind::kJsonSchema, schema));
    EXPECT_TRUE(r.ok()) << schema << ": " << r.status().to_string();
    return r.ok() ? *r : nullptr;
  }
  static bool accepts(const CompiledGrammarPtr& g, const std::string& text) {
    GrammarMatcher m(g);
    return m.accept_string(text) && m.is_completed();
  }
  // Whether any digit may follow `prefix` (accepted in full first).
  static bool digit_may_follow(const CompiledGrammarPtr& g, const std::string& prefix) {
    for (char d = '0'; d <= '9'; ++d) {
      GrammarMatcher m(g);
      EXPECT_TRUE(m.accept_string(prefix)) << prefix;
      if (m.accept_string(std::string(1, d))) return true;
    }
    return false;
  }
};

TEST_F(JsonNumberBounds, PolicyBoundsOnlyTheSidesASchemaLeavesOpen) {
  const std::string lo = std::string("\"minimum\":-") + kMaxSafe, hi = std::string("\"maximum\":") + kMaxSafe;
  EXPECT_EQ(edited(R"({"type":"integer"})"), R"({"type":"integer",)" + lo + "," + hi + "}");
  EXPECT_EQ(edited(R"({"type":"number"})"), R"({"type":"number",)" + lo + "," + hi + "}");
  EXPECT_EQ(edited(R"({"type":"integer","minimum":0})"), R"({"type":"integer","minimum":0,)" + hi + "}");
  EXPECT_EQ(edited(R"({"type":"number","exclusiveMaximum":1.5})"),
            R"({"type":"number","exclusiveMaximum":1.5,)" + lo + "}");
  EXPECT_EQ(edited(R"({"type":["integer","null"]})"), R"({"type":["integer","null"],)" + lo + "," + hi + "}");
  const char* unchanged[] = {
      R"({"type":"integer","minimum":-5,"maximum":5})",
      R"({"type":"integer","multipleOf":7})",               // XGrammar would drop multipleOf beside the range
      R"({"type":"integer","minimum":100000000000000000})",  // a maximum of 2^53-1 would empty the range
      R"({"type":"string"})",
      R"({"enum":[1,2]})",
  };
  for (const char* schema : unchanged) EXPECT_EQ(edited(schema), schema);
  EXPECT_EQ(edited(R"({"type":"object","properties":{"n":{"type":"integer"}}})"),
            R"({"type":"object","properties":{"n":{"type":"integer",)" + lo + "," + hi + "}}}");
}

TEST_F(JsonNumberBounds, ABareIntegerHasAtMostSixteenDigits) {
  CompiledGrammarPtr g = compile(R"({"type":"integer"})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, kMaxSafe));
  EXPECT_TRUE(accepts(g, std::string("-") + kMaxSafe));
  EXPECT_TRUE(accepts(g, "0"));
  EXPECT_TRUE(accepts(g, "-42"));
  EXPECT_FALSE(accepts(g, "9007199254740992"));
  EXPECT_FALSE(accepts(g, "12345678901234567"));
  EXPECT_FALSE(accepts(g, "1.5"));
  EXPECT_FALSE(digit_may_follow(g, "1234567890123456"));
  EXPECT_FALSE(digit_may_follow(g, "-1234567890123456"));
  EXPECT_TRUE(digit_may_follow(g, "123456789012345"));
}

TEST_F(JsonNumberBounds, ABareNumberHasBoundedIntegerAndFractionDigits) {
  CompiledGrammarPtr g = compile(R"({"type":"number"})");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"0", "-0.5", "3.25", "1234567890123456", "-9007199254740990.5", "0.000001"}) {
    EXPECT_TRUE(accepts(g, ok)) << ok;
  }
  EXPECT_FALSE(accepts(g, "12345678901234567"));
  EXPECT_FALSE(digit_may_follow(g, "1234567890123456"));
  EXPECT_FALSE(digit_may_follow(g, "1.123456"));  // XGrammar's range form: 6 fraction digits
  EXPECT_FALSE(accepts(g, "1e5"));                // and no exponent
}

TEST_F(JsonNumberBounds, NestedTypeListAndOneSidedSchemasAreBoundedToo) {
  CompiledGrammarPtr nested = compile(R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})");
  ASSERT_NE(nested, nullptr);
  EXPECT_TRUE(accepts(nested, R"({"n":1234567890123456})"));
  EXPECT_FALSE(accepts(nested, R"({"n":12345678901234567})"));

  CompiledGrammarPtr nullable = compile(R"({"type":["integer","null"]})");
  ASSERT_NE(nullable, nullptr);
  EXPECT_TRUE(accepts(nullable, "null"));
  EXPECT_TRUE(accepts(nullable, "1234567890123456"));
  EXPECT_FALSE(accepts(nullable, "12345678901234567"));

  CompiledGrammarPtr non_negative = compile(R"({"type":"integer","minimum":0})");
  ASSERT_NE(non_negative, nullptr);
  EXPECT_TRUE(accepts(non_negative, kMaxSafe));
  EXPECT_FALSE(accepts(non_negative, "-1"));
  EXPECT_FALSE(digit_may_follow(non_negative, "1234567890123456"));
}

TEST_F(JsonNumberBounds, SchemasLeftAloneKeepTheirMeaning) {
  CompiledGrammarPtr multiple = compile(R"({"type":"integer","multipleOf":7})");
  ASSERT_NE(multiple, nullptr);
  EXPECT_TRUE(accepts(multiple, "49"));
  EXPECT_FALSE(accepts(multiple, "50"));
  CompiledGrammarPtr huge = compile(R"({"type":"integer","minimum":100000000000000000})");
  ASSERT_NE(huge, nullptr);
  EXPECT_TRUE(accepts(huge, "100000000000000000"));
  EXPECT_FALSE(accepts(huge, "99999999999999999"));
}

}  // namespace
}  // namespace kvasir::structured
