// The keyword policy refuses what XGrammar would not enforce, naming the keyword and its JSON
// pointer, accepts what it enforces (and what is a no-op for the schema's type), and rewrites
// date/time formats and patterns into forms XGrammar enforces exactly.
#include "structured/json_schema_policy.h"

#include <gtest/gtest.h>

#include "structured/json_schema_shape.h"
#include "structured/request_regex.h"

namespace kvasir::structured {
namespace {

Status check(const std::string& text, SchemaEdits* edits = nullptr, bool strict = false) {
  auto j = parse_json(text);
  if (!j.ok()) return j.status();
  SchemaEdits local;
  JsonSchemaPolicyOptions options;
  options.strict = strict;
  static Json keep;  // edits point into the document
  keep = std::move(*j);
  return check_json_schema(keep, options, edits != nullptr ? edits : &local);
}

void expect_refused(const std::string& schema, const std::string& keyword, const std::string& where) {
  Status s = check(schema);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << schema << " -> " << s.to_string();
  EXPECT_NE(s.message().find("'" + keyword + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(where), std::string::npos) << s.message();
}

TEST(JsonSchemaPolicy, RefusesKeywordsXGrammarDoesNotEnforceNamingThemAndTheirPath) {
  expect_refused(R"({"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}})", "uniqueItems",
                 "/properties/tags");
  expect_refused(R"({"type":"array","contains":{"type":"integer"}})", "contains", "the schema root");
  expect_refused(R"({"type":"object","properties":{"a":{"not":{"type":"null"}}}})", "not", "/properties/a");
  expect_refused(R"({"if":{"type":"string"},"then":{"minLength":1}})", "if", "the schema root");
  expect_refused(R"({"type":"object","dependentRequired":{"a":["b"]}})", "dependentRequired", "the schema root");
  expect_refused(R"({"type":"object","properties":{"a":{}},"dependencies":{"a":["b"]}})", "dependencies", "");
  expect_refused(R"({"type":"number","multipleOf":0.5})", "multipleOf", "the schema root");
  expect_refused(R"({"type":"integer","multipleOf":3,"minimum":0})", "multipleOf", "one-sided");
  expect_refused(R"({"type":"integer","multipleOf":3,"minimum":0,"maximum":100000})", "multipleOf", "10000");
  expect_refused(R"({"type":"integer","multipleOf":2048})", "multipleOf", "1024");
  expect_refused(R"({"type":"string","format":"hostname"})", "format", "hostname");
  expect_refused(R"({"type":"string","format":"phone"})", "format", "phone");
  expect_refused(R"({"type":"string","pattern":"^a+$","maxLength":3})", "maxLength", "pattern");
  expect_refused(R"({"type":"string","format":"email","pattern":"a"})", "pattern", "format");
  expect_refused(R"({"minLength":3})", "minLength", "only beside 'type'");
  expect_refused(R"({"$ref":"#/$defs/a","type":"object","$defs":{"a":{"type":"object"}}})", "type", "'$ref'");
  expect_refused(R"({"anyOf":[{"type":"string"}],"type":"string"})", "type", "'anyOf'");
  expect_refused(R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf", "single subschema");
  expect_refused(R"({"type":"object","required":["a"]})", "required", "'a'");
  expect_refused(R"({"type":"object","properties":{"a":{}},"patternProperties":{"^b":{}}})", "patternProperties",
                 "properties");
  expect_refused(R"({"type":"object","patternProperties":{"^a":{},"^b":{}}})", "patternProperties", "one pattern");
  expect_refused(R"({"type":"object","propertyNames":{"pattern":"^a"},"additionalProperties":false})", "propertyNames",
                 "additional");
  expect_refused(R"({"type":"object","propertyNames":{"enum":["a",1]}})", "enum", "propertyNames");
  expect_refused(R"({"$ref":"https://example.com/s.json"})", "$ref", "local");
  expect_refused(R"({"type":"object","properties":{"a":{"$id":"x","type":"string"}}})", "$id", "root");
  expect_refused(R"({"type":"object","nullable":true})", "nullable", "unknown");
  expect_refused(R"({"type":"array","items":{"type":"string"},"additionalItems":false})", "additionalItems", "");
  expect_refused(R"({"type":"string","contentEncoding":"base64"})", "contentEncoding", "");
  expect_refused(R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})", "oneOf", "disjoint");
  expect_refused(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", "oneOf", "disjoint");
  expect_refused(R"({"const":"a","type":"integer"})", "type", "'const'");
  expect_refused(R"({"type":"string","pattern":"^(?!admin).*$"})", "pattern", "lookaround");
  expect_refused(R"({"type":"string","pattern":"a^b"})", "pattern", "'^'");
  expect_refused(R"({"type":"string","pattern":"\\Aabc"})", "pattern", "\\A");
  expect_refused(R"({"type":"string","pattern":"\\p{L}+"})", "pattern", "\\p");
  // A 'false' subschema is refused naming the keyword that holds it.
  expect_refused(R"({"type":"object","properties":{"a":false}})", "properties", "/properties/a");
  expect_refused(R"({"anyOf":[{"type":"string"},false]})", "anyOf", "/anyOf/1");
  expect_refused(R"({"$ref":"#/$defs/b","$defs":{"b":false}})", "$defs", "/$defs/b");
  expect_refused(R"({"type":"object","properties":{"anyOf":{"type":"object","properties":{"x":false}}}})",
                 "properties", "/properties/anyOf/properties/x");
}

TEST(JsonSchemaPolicy, AnEmptyEnumIsABadRequestNamingIt) {
  Status s = check(R"({"type":"object","properties":{"a":{"enum":[]}}})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'enum'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/properties/a"), std::string::npos) << s.message();
}

TEST(JsonSchemaPolicy, AcceptsWhatXGrammarEnforces) {
  for (const char* schema : {
           R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":20},
               "age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},
               "minItems":1,"maxItems":5,"uniqueItems":false}},"required":["name","age"],"additionalProperties":false,
               "title":"Person","description":"d","$schema":"https://json-schema.org/draft/2020-12/schema"})",
           R"({"type":"integer","multipleOf":5,"minimum":0,"maximum":100})",
           R"({"type":"integer","multipleOf":7})",
           R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})",
           R"({"enum":["a","b",null]})",
           R"({"enum":["a","b"],"type":"string"})",
           R"({"const":"cat","type":"string"})",
           R"({"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Optional"})",
           R"({"oneOf":[{"type":"string"},{"type":"integer"}]})",
           R"({"oneOf":[{"const":1},{"const":2},{"enum":["x","y"]}]})",
           R"({"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}],"discriminator":{"propertyName":"kind"},
               "$defs":{"Cat":{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},
               "required":["kind"]},"Dog":{"type":"object","properties":{"kind":{"const":"dog","type":"string"}},
               "required":["kind"]}}})",
           R"({"allOf":[{"$ref":"#/definitions/A"}],"definitions":{"A":{"type":"boolean"}}})",
           R"({"type":"object","properties":{"next":{"$ref":"#"}},"x-vendor":1})",
           R"({"type":"string","minimum":3,"items":{"uniqueItems":true}})",
           R"({"type":["string","null"],"maxLength":3})",
           R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false})",
           R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":{"type":"integer"}})",
           R"({"type":"string","format":"email"})",
           R"({"type":"string","format":"uuid"})",
           R"({"properties":{"a":{"type":"integer"}}})",
           R"({"items":{"type":"integer"}})",
           R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
           R"(true)",
           R"({})",
       }) {
    EXPECT_TRUE(check(schema).ok()) << schema << " -> " << check(schema).to_string();
  }
}

TEST(JsonSchemaPolicy, DuplicateKeysAndDanglingRefsAreInvalid) {
  EXPECT_EQ(check(R"({"type":"string","type":"integer"})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(check(R"({"enum":[{"a":1,"a":2}]})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check(R"({"type":[],"minLength":3})").code(), StatusCode::kInvalidArgument);
}

TEST(JsonSchemaPolicy, RefTargetsAreChecked) {
  // The target lives under a key XGrammar only reaches through the reference.
  expect_refused(R"({"$ref":"#/examples/0","examples":[{"type":"array","uniqueItems":true}]})", "uniqueItems",
                 "/examples/0");
  // Cycles end.
  EXPECT_TRUE(check(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"type":"null"})").ok());
}

TEST(JsonSchemaPolicy, DateAndTimeFormatsBecomeExactPatterns) {
  SchemaEdits edits;
  ASSERT_TRUE(check(R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})", &edits).ok());
  auto j = parse_json(R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})");
  SchemaEdits e2;
  ASSERT_TRUE(check_json_schema(*j, {}, &e2).ok());
  std::string out = dump_with_edits(*j, e2);
  EXPECT_EQ(out.find("format"), std::string::npos) << out;
  EXPECT_NE(out.find("\"pattern\":\"^(?:[0-9]{4}-"), std::string::npos) << out;
}

TEST(JsonSchemaPolicy, PatternsAreRewrittenForXGrammarsJsonStringAutomaton) {
  auto p = json_schema_pattern_to_xgrammar("^caf\xC3\xA9.$");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "^caf\\u00E9[^\\n\\r\\u2028\\u2029]$");
  EXPECT_EQ(*json_schema_pattern_to_xgrammar("^[a-z.]+(?:-\\d{2})?$|^x$"), "^[a-z.]+(?:-\\d{2})?$|^x$");
  EXPECT_EQ(*json_schema_pattern_to_xgrammar("(?<year>\\d{4})"), "(?<year>\\d{4})");
  EXPECT_FALSE(json_schema_pattern_to_xgrammar("(?i)abc").ok());
  EXPECT_FALSE(json_schema_pattern_to_xgrammar("[]").ok());
  EXPECT_FALSE(json_schema_pattern_to_xgrammar("a\\1").ok());
  EXPECT_TRUE(check_output_regex("^(a|b)+$").ok());
  EXPECT_FALSE(check_output_regex("a(?=b)").ok());
  EXPECT_FALSE(check_output_regex("a$b").ok());
  EXPECT_EQ(check_output_regex("\\uXYZW").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check_output_regex("\\x4").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_output_regex("\\u00e9\\u{1F600}\\x41\\cJ").ok());
}

TEST(JsonSchemaShape, OneOfDisjointnessIsSound) {
  auto root = parse_json("{}");
  auto disjoint = [&](const char* options) { return oneof_disjoint(*root, *parse_json(options)); };
  EXPECT_TRUE(disjoint(R"([{"type":"string"},{"type":"boolean"},{"type":"null"}])"));
  EXPECT_FALSE(disjoint(R"([{"type":"number"},{"type":"integer"}])"));
  EXPECT_FALSE(disjoint(R"([{"const":1},{"const":1.0}])"));
  EXPECT_TRUE(disjoint(R"([{"const":1.5},{"type":"integer"}])"));
  EXPECT_FALSE(disjoint(R"([{"const":2},{"type":"number"}])"));
  EXPECT_FALSE(disjoint(R"([{"type":"object","properties":{"k":{"const":"a"}}},
                             {"type":"object","properties":{"k":{"const":"b"}}}])"));  // k not required
  EXPECT_TRUE(disjoint(R"([{"type":"object","properties":{"k":{"enum":["a","b"]}},"required":["k"]},
                            {"type":"object","properties":{"k":{"const":"c"}},"required":["k"]}])"));
  EXPECT_FALSE(disjoint(R"([{}, {"type":"string"}])"));
  EXPECT_TRUE(
      json_equal(*parse_json(R"({"a":[1,{"b":null}],"c":2})"), *parse_json(R"({"c":2.0,"a":[1.0,{"b":null}]})")));
}

}  // namespace
}  // namespace kvasir::structured
