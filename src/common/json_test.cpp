#include "common/json.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

TEST(Json, ParsesNestedDocumentAndKeepsKeyOrder) {
  auto j = parse_json(R"({"b": [1, 2.5, "x", null, true], "a": {"c": false}})");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  ASSERT_TRUE(j->is_object());
  EXPECT_EQ(j->as_object()[0].first, "b");
  EXPECT_EQ(j->find("b")->as_array()[0].as_int(), 1);
  EXPECT_DOUBLE_EQ(j->find("b")->as_array()[1].as_double(), 2.5);
  EXPECT_EQ(j->find("b")->as_array()[2].as_string(), "x");
  EXPECT_FALSE(j->find("a")->get_bool("c", true));
  EXPECT_EQ(j->dump(), R"({"b":[1,2.5,"x",null,true],"a":{"c":false}})");
}

TEST(Json, DecodesEscapesAndSurrogatePairs) {
  auto j = parse_json(R"("a\n\u00e9\ud83d\ude00\"")");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->as_string(), "a\n\xc3\xa9\xf0\x9f\x98\x80\"");
  Json::DumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(j->dump(ascii), R"("a\n\u00e9\ud83d\ude00\"")");
  EXPECT_EQ(j->dump(), "\"a\\n\xc3\xa9\xf0\x9f\x98\x80\\\"\"");
}

TEST(Json, RejectsMalformedInputWithByteOffsets) {
  const char* bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\ud800\"", "\"\\udc00\"",
                       "\"\xff\"", "tru", "nul", "[1] x", "{\"a\":1,}", "\"a\tb\"", "1e", "NaN",
                       "Infinity", "1e999"};
  for (const char* s : bad) {
    auto j = parse_json(s);
    EXPECT_FALSE(j.ok()) << "accepted: " << s;
    if (!j.ok()) {
      EXPECT_NE(j.status().message().find("byte"), std::string::npos);
    }
  }
}

TEST(Json, EnforcesDepthLimitWithoutRecursingForever) {
  std::string deep(100000, '[');
  auto j = parse_json(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("nesting"), std::string::npos);
}

TEST(Json, NumbersKeepIntegerness) {
  auto j = parse_json("[9223372036854775807, -3, 1e3, 0.1, 1e16, 1e15, 1.5e-7]");
  ASSERT_TRUE(j.ok());
  const auto& a = j->as_array();
  EXPECT_TRUE(a[0].is_int());
  EXPECT_EQ(a[0].as_int(), INT64_MAX);
  EXPECT_TRUE(a[2].is_number() && !a[2].is_int());
  // Serialization follows Python's repr(float).
  EXPECT_EQ(j->dump(), "[9223372036854775807,-3,1000.0,0.1,1e+16,1000000000000000.0,1.5e-07]");
}

TEST(Json, IndentAndSeparatorsMatchPython) {
  auto j = parse_json(R"({"a":[1,{"b":2}],"c":{}})");
  ASSERT_TRUE(j.ok());
  Json::DumpOptions o;
  o.indent = 2;
  o.item_sep = ",";
  o.key_sep = ": ";
  EXPECT_EQ(j->dump(o), "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}");
  Json::DumpOptions py;
  py.item_sep = ", ";
  py.key_sep = ": ";
  EXPECT_EQ(j->dump(py), R"({"a": [1, {"b": 2}], "c": {}})");
}

}  // namespace
}  // namespace kvasir
