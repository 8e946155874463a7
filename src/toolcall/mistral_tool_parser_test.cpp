// mistral on outputs in each of its tokenizer generations' formats.
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

bool mistral_id(const std::string& id) {
  if (id.size() != 9) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

TEST(MistralToolParser, V3JsonArray) {
  expect_parses("mistral",
                R"([TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", "format": "celsius"}}])",
                {"", {{"get_current_weather", R"({"location": "Paris, France", "format": "celsius"})"}}, true});
}

TEST(MistralToolParser, NemoArrayWithModelIdsAndContentBefore) {
  expect_parses("mistral",
                "Sure, let me calculate that.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 3.5, \"b\": 4}, "
                "\"id\": \"bYXqMNvcA\"}, {\"name\": \"mul\", \"arguments\": {\"a\": 2, \"b\": [7, {\"c\": \"\xC3\xA9\"}]}, "
                "\"id\": \"Zr4HNsW8Q\"}]",
                {"Sure, let me calculate that.",
                 {{"add", R"({"a": 3.5, "b": 4})"}, {"mul", "{\"a\": 2, \"b\": [7, {\"c\": \"\xC3\xA9\"}]}"}},
                 true});
}

TEST(MistralToolParser, V11NameThenArguments) {
  expect_parses("mistral",
                "[TOOL_CALLS]get_weather{\"city\": \"Lyon\", \"days\": 3}[TOOL_CALLS]get_time{\"tz\": \"Europe/Paris\"}",
                {"", {{"get_weather", R"({"city": "Lyon", "days": 3})"}, {"get_time", R"({"tz": "Europe/Paris"})"}}, true});
}

TEST(MistralToolParser, V13ArgsAndCallIdControlTokens) {
  expect_parses("mistral",
                "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Krak\xC3\xB3w\"}"
                "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{\"tz\": \"CET\"}",
                {"Checking.", {{"get_weather", "{\"city\": \"Krak\xC3\xB3w\"}"}, {"get_time", R"({"tz": "CET"})"}}, true});
}

TEST(MistralToolParser, IdsAreNineAlphanumerics) {
  std::string text = "[TOOL_CALLS]f{}[TOOL_CALLS]g{\"x\": 1}";
  auto p = make("mistral");
  ParsedToolCalls whole = p->parse_complete(text);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  for (const ToolCall& c : whole.tool_calls) EXPECT_TRUE(mistral_id(c.id)) << c.id;
  ParsedToolCalls s = stream_split("mistral", text, {5, 13});
  for (const ToolCall& c : s.tool_calls) EXPECT_TRUE(mistral_id(c.id)) << c.id;
}

TEST(MistralToolParser, TextWithoutCallsOrWithBrokenMarkersIsContent) {
  const char* texts[] = {
      "[1] See the [TOOL_CALL] docs and [TOOL_CALLS",
      "[TOOL_CALLS] I cannot call tools for that.",
      "[TOOL_CALLS][]",
      "[TOOL_CALLS][{\"arguments\": {}}]",
      "[TOOL_CALLS]get_weather",
      "[TOOL_CALLS]get_weather[ARGS]\"Paris\"",
      "Answer: 4.[TOOL_CALLS]",
  };
  for (const char* text : texts) expect_parses("mistral", text, content_only(text));
}

TEST(MistralToolParser, TruncatedArgumentsAreContentWhenParsedWhole) {
  std::string text = "Let me add.[TOOL_CALLS]add{\"a\": 1, \"b\": ";
  auto p = make("mistral");
  ParsedToolCalls whole = p->parse_complete(text);
  EXPECT_FALSE(whole.tools_called());
  EXPECT_EQ(whole.content, text);
  bool broken = false;
  ParsedToolCalls s = stream_split("mistral", text, {12, 30}, &broken);
  EXPECT_TRUE(broken);
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_EQ(s.tool_calls[0].arguments, "{\"a\": 1, \"b\": ");
  EXPECT_EQ(s.content, "Let me add.");
}

}  // namespace
}  // namespace kvasir::toolcall_test
