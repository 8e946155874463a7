#include "server/structured_outputs_json.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

using Kind = StructuredOutputSpec::Kind;

StatusOr<SamplingParams> read(const std::string& body) {
  auto j = parse_json(body);
  if (!j.ok()) return j.status();
  SamplingParams p;
  KVASIR_RETURN_IF_ERROR(apply_structured_outputs_json(*j, &p));
  return p;
}

TEST(StructuredOutputsJson, ResponseFormatKinds) {
  auto text = read(R"({"response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->structured_outputs.has_value());

  auto obj = read(R"({"response_format": {"type": "json_object"}})");
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ(obj->structured_outputs->kind, Kind::kJsonObject);

  auto schema = read(R"({"response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})");
  ASSERT_TRUE(schema.ok()) << schema.status().message();
  EXPECT_EQ(schema->structured_outputs->kind, Kind::kJsonSchema);
  auto round = parse_json(schema->structured_outputs->text);
  ASSERT_TRUE(round.ok());
  EXPECT_TRUE(round->find("properties") != nullptr);
}

TEST(StructuredOutputsJson, VllmSpellings) {
  auto re = read(R"({"structured_outputs": {"regex": "[a-z]+"}})");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->structured_outputs->kind, Kind::kRegex);
  EXPECT_EQ(re->structured_outputs->text, "[a-z]+");

  auto choice = read(R"({"guided_choice": ["yes", "no"]})");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->structured_outputs->kind, Kind::kChoice);
  EXPECT_EQ(choice->structured_outputs->choices, (std::vector<std::string>{"yes", "no"}));

  auto g = read(R"({"guided_grammar": "root ::= \"a\""})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->structured_outputs->kind, Kind::kGrammar);

  auto js = read(R"({"guided_json": "{\"type\": \"string\"}"})");
  ASSERT_TRUE(js.ok());
  EXPECT_EQ(js->structured_outputs->kind, Kind::kJsonSchema);
}

TEST(StructuredOutputsJson, RefusesWhatItCannotHonour) {
  // Two constraints at once: which one wins would be a guess.
  EXPECT_FALSE(read(R"({"guided_regex": "a", "guided_choice": ["a"]})").ok());
  EXPECT_FALSE(read(R"({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}})").ok());
  // Options not implemented are refused, never ignored.
  auto ws = read(R"({"guided_whitespace_pattern": " "})");
  EXPECT_EQ(ws.status().code(), StatusCode::kUnimplemented);
  auto dis = read(R"({"structured_outputs": {"json_object": true, "disable_any_whitespace": true}})");
  EXPECT_EQ(dis.status().code(), StatusCode::kUnimplemented);
  auto unk = read(R"({"structured_outputs": {"ebnf": "x"}})");
  EXPECT_EQ(unk.status().code(), StatusCode::kUnimplemented);
  // Shapes.
  EXPECT_FALSE(read(R"({"response_format": {"type": "json_schema"}})").ok());
  EXPECT_FALSE(read(R"({"response_format": {"type": "yaml"}})").ok());
  EXPECT_FALSE(read(R"({"guided_choice": []})").ok());
  EXPECT_FALSE(read(R"({"guided_json": "{not json"})").ok());
  EXPECT_FALSE(read(R"({"guided_regex": 5})").ok());
}

}  // namespace
}  // namespace kvasir
