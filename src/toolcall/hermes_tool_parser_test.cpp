// hermes on outputs written the way Qwen2.5/Qwen3/Hermes 2 Pro write them.
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

TEST(HermesToolParser, Qwen25SingleCallKeepsTheModelsArgumentsText) {
  expect_parses("hermes",
                "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"San Francisco, CA\", "
                "\"unit\": \"fahrenheit\"}}\n</tool_call>",
                {"", {{"get_current_weather", R"({"location": "San Francisco, CA", "unit": "fahrenheit"})"}}, true});
}

TEST(HermesToolParser, Qwen3ContentThenTwoCallsWithNestedUnicodeArguments) {
  std::string text =
      "I'll look up both cities for you.\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\xC3\xBCrich\", \"options\": "
      "{\"units\": \"metric\", \"days\": [1, 2.5, -3e2], \"extra\": null, \"ok\": true}}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\xE6\x9D\xB1\xE4\xBA\xAC\", \"note\": "
      "\"rain \xF0\x9F\x8C\xA7\xEF\xB8\x8F, \\\"quoted\\\", \\u00e9\\ud83d\\ude00\\n\"}}\n</tool_call>";
  expect_parses(
      "hermes", text,
      {"I'll look up both cities for you.",
       {{"get_weather",
         R"({"city": "Zürich", "options": {"units": "metric", "days": [1, 2.5, -300.0], "extra": null, "ok": true}})"},
        {"get_weather", "{\"city\": \"\xE6\x9D\xB1\xE4\xBA\xAC\", \"note\": \"rain \xF0\x9F\x8C\xA7\xEF\xB8\x8F, "
                        "\\\"quoted\\\", \xC3\xA9\xF0\x9F\x98\x80\\n\"}"}}});
}

TEST(HermesToolParser, TextAfterAndBetweenCallsIsContentWithoutTheWhitespaceAroundCalls) {
  expect_parses("hermes",
                "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\nNow the second one:\n\n"
                "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\nDone.\n",
                {"Now the second one:\nDone.\n", {{"a", R"({"x": 1})"}, {"b", "{}"}}});
}

TEST(HermesToolParser, ArgumentsBeforeNameWaitForTheName) {
  expect_parses("hermes",
                "<tool_call>\n{\"arguments\": {\"symbol\": \"TSLA\", \"period\": {\"from\": \"2024-01\"}}, "
                "\"name\": \"get_stock_fundamentals\"}\n</tool_call>",
                {"", {{"get_stock_fundamentals", R"({"symbol": "TSLA", "period": {"from": "2024-01"}})"}}, true});
}

TEST(HermesToolParser, MissingArgumentsAndMissingCloseTagAreTolerated) {
  expect_parses("hermes", "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>", {"", {{"get_time", "{}"}}});
  expect_parses("hermes", "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n",
                {"Sure.", {{"f", R"({"q": "x"})"}}});
  // Generation stopped inside the close tag.
  expect_parses("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_c", {"", {{"f", "{}"}}});
}

TEST(HermesToolParser, TwoObjectsInOneBlockAreTwoCalls) {
  expect_parses("hermes",
                "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n{\"name\": \"b\", \"arguments\": {\"k\": [\"v\"]}}\n"
                "</tool_call>",
                {"", {{"a", "{}"}, {"b", R"({"k": ["v"]})"}}});
}

TEST(HermesToolParser, OutputWithoutCallsComesBackVerbatim) {
  for (std::string text : {std::string("  Hello there!  \n"), std::string("a < b and <tool> or <tool_call without >"),
                           std::string("Use <tool_call> tags like </tool_call> in prose? no: <tool_call"),
                           std::string("caf\xC3\xA9 \xE2\x82\xAC 100 \xF0\x9F\x98\x80"), std::string("\n\n"),
                           std::string("")}) {
    auto p = make("hermes");
    ParsedToolCalls r = p->parse_complete(text);
    if (text.find("<tool_call>") != std::string::npos) {
      // A marker followed by prose is not a call: the whole text is content.
      EXPECT_EQ(r.content, text);
      EXPECT_FALSE(r.tools_called());
    }
    expect_parses("hermes", text, content_only(text));
  }
}

TEST(HermesToolParser, MalformedBlocksAreContent) {
  const char* texts[] = {
      "<tool_call>\nnot json at all\n</tool_call>",
      "<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n</tool_call>",
      "<tool_call>{\"name\": 42, \"arguments\": {}}</tool_call>",
      "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
      "<tool_call>{\"arguments\": {\"a\": 1}}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>",
      "Checking.\n<tool_call>\n{\"name\": \"f\"",
      "<tool_call>",
      "<tool_call>\n\n",
  };
  for (const char* text : texts) expect_parses("hermes", text, content_only(text));
}

TEST(HermesToolParser, AMalformedBlockAfterAGoodCallLeavesTheCallAndTurnsTheRestToContent) {
  expect_parses("hermes",
                "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call> and "
                "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
                {"<tool_call>oops</tool_call> and <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
                 {{"a", "{}"}}});
}

TEST(HermesToolParser, ArgumentsThatBreakAfterStreamingBeganAreContentWhenParsedWhole) {
  // Python literals inside JSON and a cut-off call: the stream has already sent part of the call.
  std::string texts[] = {
      "Let me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": True}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 01}}",
  };
  for (const std::string& text : texts) {
    auto p = make("hermes");
    ParsedToolCalls whole = p->parse_complete(text);
    bool first_ok = text.find("\"a\", \"arguments\": {}}") != std::string::npos;
    if (first_ok) {
      ASSERT_EQ(whole.tool_calls.size(), 1u);
      EXPECT_EQ(whole.content, text.substr(text.find("\n<tool_call>{\"name\": \"b\"") + 1));
    } else {
      EXPECT_FALSE(whole.tools_called());
      EXPECT_EQ(whole.content, text);
    }
    for (const auto& cuts : stream_splits(text)) {
      bool broken = false;
      ParsedToolCalls s = stream_split("hermes", text, cuts, &broken);
      EXPECT_TRUE(broken);
      ASSERT_EQ(s.tool_calls.size(), whole.tool_calls.size() + 1);
      // What did stream of the broken call is a prefix of valid JSON text.
      EXPECT_EQ(text.find(s.tool_calls.back().arguments) != std::string::npos, true);
    }
  }
}

}  // namespace
}  // namespace kvasir::toolcall_test
