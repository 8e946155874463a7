// llama3_json on outputs written the way Llama 3.1-3.3 write them with the JSON tool template.
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

TEST(Llama3JsonToolParser, SingleCallKeepsTheModelsArgumentsText) {
  expect_parses("llama3_json",
                R"({"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}})",
                {"", {{"get_current_conditions", R"({"location": "San Francisco, CA", "unit": "Fahrenheit"})"}}, true});
}

TEST(Llama3JsonToolParser, PythonTagAndSemicolonSeparatedCalls) {
  expect_parses("llama3_json",
                "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"actualit\xC3\xA9s Montr\xC3\xA9"
                "al \xF0\x9F\x8D\x81\"}}; {\"name\": \"get_time\", \"arguments\": {\"tz\": \"America/Toronto\"}}",
                {"",
                 {{"search", "{\"query\": \"actualit\xC3\xA9s Montr\xC3\xA9" "al \xF0\x9F\x8D\x81\"}"},
                  {"get_time", R"({"tz": "America/Toronto"})"}},
                 true});
}

TEST(Llama3JsonToolParser, LeadingWhitespaceTypeKeyAndNestedArguments) {
  expect_parses("llama3_json",
                "\n\n{\"type\": \"function\", \"name\": \"book\", \"parameters\": {\"guests\": [{\"name\": \"Ana\", "
                "\"age\": 31}, {\"name\": \"Bo\", \"age\": null}], \"dates\": {\"from\": \"2025-07-01\"}}}",
                {"", {{"book", R"({"guests": [{"name": "Ana", "age": 31}, {"name": "Bo", "age": null}], "dates": {"from": "2025-07-01"}})"}}});
}

TEST(Llama3JsonToolParser, ObjectsOnSeparateLinesAndTextAfterTheCalls) {
  expect_parses("llama3_json",
                "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {\"x\": [1]}}\n\nThat's all.",
                {"That's all.", {{"a", "{}"}, {"b", R"({"x": [1]})"}}});
}

TEST(Llama3JsonToolParser, AnswersThatAreNotCallsAreContent) {
  const char* texts[] = {
      "The weather in Paris is sunny, 24\xC2\xB0" "C.",
      "I {think} so.",
      "{\"answer\": 42, \"reason\": \"it is the answer\"}",
      "{\"name\": \"Bob\", \"age\": 3}",
      "{\"name\": \"f\"}",
      "{\"name\": \"f\", \"parameters\": [1, 2]}",
      "<|python_tag|>brave_search.call(query=\"weather in Paris\")",
      "  {\"parameters\": {\"a\": 1}}  ",
      "{",
      "",
  };
  for (const char* text : texts) expect_parses("llama3_json", text, content_only(text));
}

TEST(Llama3JsonToolParser, CallsMustOpenTheOutput) {
  const char* text = "Here you go: {\"name\": \"f\", \"parameters\": {}}";
  expect_parses("llama3_json", text, content_only(text));
}

TEST(Llama3JsonToolParser, BrokenArgumentsAreContentWhenParsedWhole) {
  for (std::string text : {std::string(R"({"name": "f", "parameters": {"x": 1,}})"),
                           std::string(R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {"y": tru)")}) {
    auto p = make("llama3_json");
    ParsedToolCalls whole = p->parse_complete(text);
    EXPECT_FALSE(whole.tools_called());
    EXPECT_EQ(whole.content, text);
    bool broken = false;
    ParsedToolCalls s = stream_split("llama3_json", text, {3, 17}, &broken);
    EXPECT_TRUE(broken);
    EXPECT_TRUE(s.tools_called());
  }
}

TEST(Llama3JsonToolParser, Llama4JsonIsAnAlias) {
  auto p = make("llama4_json");
  EXPECT_EQ(p->info().name, "llama3_json");
  EXPECT_FALSE(p->info().content_before_calls);
}

}  // namespace
}  // namespace kvasir::toolcall_test
