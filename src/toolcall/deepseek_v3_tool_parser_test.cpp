// deepseek_v3 on outputs written the way DeepSeek V3 / R1-0528 (and V3.1) write tool calls.
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";

std::string v3_call(const std::string& name, const std::string& args) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + args + "\n```" + kCallEnd;
}

TEST(DeepSeekV3ToolParser, ContentThenTwoFencedCalls) {
  std::string text = "Let me check the weather.\n" + kCallsBegin + v3_call("get_current_weather", R"({"location": "Beijing"})") +
                     "\n" + v3_call("get_current_weather", R"({"location": "上海", "unit": "celsius"})") + kCallsEnd;
  expect_parses("deepseek_v3", text,
                {"Let me check the weather.",
                 {{"get_current_weather", R"({"location": "Beijing"})"},
                  {"get_current_weather", R"({"location": "上海", "unit": "celsius"})"}},
                 true});
}

TEST(DeepSeekV3ToolParser, MultiLineNestedArgumentsAndTextAfterTheBlock) {
  std::string args = "{\n  \"query\": {\"filters\": [{\"field\": \"date\", \"op\": \">=\", \"value\": \"2024-01-01\"}],"
                     " \"limit\": 10}\n}";
  std::string text = kCallsBegin + v3_call("search_db", args) + kCallsEnd + "\nAnything else?";
  expect_parses("deepseek_v3", text, {"Anything else?", {{"search_db", args}}, true});
}

TEST(DeepSeekV3ToolParser, V31FormAndAMissingBlockEnd) {
  std::string text = kCallsBegin + kCallBegin + "get_weather" + kSep + R"({"city": "Tokyo"})" + kCallEnd + kCallBegin +
                     "get_time" + kSep + "{}" + kCallEnd;
  expect_parses("deepseek_v3", text, {"", {{"get_weather", R"({"city": "Tokyo"})"}, {"get_time", "{}"}}, true});
}

TEST(DeepSeekV3ToolParser, MalformedBlocksAreContent) {
  std::string texts[] = {
      kCallsBegin + "garbage",
      kCallsBegin + kCallBegin + "function" + kSep + "f\nnot a fence" + kCallEnd + kCallsEnd,
      kCallsBegin + kCallsEnd,
      "Mentioning <｜tool▁calls but no block.",
      kCallsBegin + kCallBegin + "function" + kSep + "f\n```json\n[1, 2]\n```" + kCallEnd,
      // Found by tool_parser_fuzz: the fence's language tag must not go on after a newline.
      kCallsBegin + kCallBegin + "function" + kSep + "f\n```jso\nn{}\n```" + kCallEnd,
  };
  for (const std::string& text : texts) expect_parses("deepseek_v3", text, content_only(text));
}

TEST(DeepSeekV3ToolParser, BrokenArgumentsAreContentWhenParsedWhole) {
  std::string text = "Ok.\n" + kCallsBegin + v3_call("f", "{\"a\": 1") + kCallsEnd;
  auto p = make("deepseek_v3");
  ParsedToolCalls whole = p->parse_complete(text);
  EXPECT_FALSE(whole.tools_called());
  EXPECT_EQ(whole.content, text);
  bool broken = false;
  ParsedToolCalls s = stream_split("deepseek_v3", text, {10, 40}, &broken);
  EXPECT_TRUE(broken);
  EXPECT_EQ(s.content.substr(0, 3), "Ok.");
}

}  // namespace
}  // namespace kvasir::toolcall_test
