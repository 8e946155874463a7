// The public surface: the registry, OpenAI shapes, reassembly, and what holds for every parser.
#include "toolcall/tool_parser.h"

#include <gtest/gtest.h>

#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

TEST(ToolParserRegistry, NamesEveryParserAndRefusesOthersListingThem) {
  std::vector<std::string> want = {"deepseek_v3", "hermes", "llama3_json", "llama4_json", "mistral", "pythonic"};
  EXPECT_EQ(tool_parser_names(), want);
  for (const std::string& name : want) {
    auto p = make_tool_parser(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_FALSE((*p)->info().needs_request_tools);
  }
  auto bad = make_tool_parser("qwen25");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("supported: deepseek_v3, hermes, llama3_json"), std::string::npos);
}

TEST(ToolParserRegistry, InfoSaysWhoTakesContentBeforeCallsAndWhoNeedsSpecialTokens) {
  EXPECT_TRUE(make("hermes")->info().content_before_calls);
  EXPECT_TRUE(make("mistral")->info().content_before_calls);
  EXPECT_TRUE(make("deepseek_v3")->info().content_before_calls);
  EXPECT_FALSE(make("llama3_json")->info().content_before_calls);
  EXPECT_FALSE(make("pythonic")->info().content_before_calls);
  EXPECT_TRUE(make("mistral")->info().needs_special_tokens);
  EXPECT_TRUE(make("hermes")->info().needs_special_tokens);
  EXPECT_FALSE(make("pythonic")->info().needs_special_tokens);  // the list parses without Llama 4's tags
}

TEST(ToolCallJson, HasOpenAIsShapes) {
  ToolCall c{"call_1", "f", R"({"a": 1})"};
  EXPECT_EQ(c.to_json().dump(), R"({"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}})");
  ToolCallDelta first{0, "call_1", "f", ""};
  EXPECT_EQ(first.to_json().dump(),
            R"({"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}})");
  ToolCallDelta later{0, "", "", "{\"a\""};
  EXPECT_EQ(later.to_json().dump(), R"({"index":0,"function":{"arguments":"{\"a\""}})");
}

TEST(ToolParserStream, ContentAfterACallInOneFeedComesInTheNextDelta) {
  auto p = make("hermes");
  StreamDelta a = p->feed("Hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>Bye");
  EXPECT_EQ(a.content, "Hi");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  StreamDelta b = p->feed(" now");
  EXPECT_EQ(b.content, "Bye now");
  EXPECT_TRUE(b.tool_calls.empty());
  EXPECT_TRUE(p->finish().empty());
  EXPECT_EQ(p->num_tool_calls(), 1u);
}

TEST(ToolParserStream, HoldsBackOnlyWhatMayBeAMarker) {
  auto p = make("hermes");
  EXPECT_EQ(p->feed("The answer <").content, "The answer");  // the space too: a call may follow
  EXPECT_EQ(p->feed("b> is <tool").content, " <b> is");
  EXPECT_EQ(p->feed("box>").content, " <toolbox>");
  EXPECT_EQ(p->feed("\xE2\x82").content, "");  // half a character is never sent
  EXPECT_EQ(p->feed("\xAC").content, "\xE2\x82\xAC");
  EXPECT_EQ(p->finish().content, "");
}

TEST(ToolParserStream, ParseCompleteLeavesTheStreamAlone) {
  auto p = make("hermes");
  StreamDelta a = p->feed("<tool_call>{\"name\": \"a\", ");
  ParsedToolCalls whole = p->parse_complete("<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].name, "x");
  StreamDelta b = p->feed("\"arguments\": {}}</tool_call>");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.tool_calls[0].name, "a");
  EXPECT_EQ(b.tool_calls[0].index, 0);
}

TEST(ToolParserStream, IdsAreUniqueAcrossCallsAndParsers) {
  std::set<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    ParsedToolCalls r = make("hermes")->parse_complete(
        "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>");
    for (const ToolCall& c : r.tool_calls) {
      EXPECT_EQ(c.id.rfind("call_", 0), 0u);
      EXPECT_EQ(c.id.size(), 29u);
      EXPECT_TRUE(ids.insert(c.id).second);
    }
  }
}

TEST(ToolParserStream, AppendDeltaReassemblesWhatAClientWould) {
  ParsedToolCalls acc;
  append_delta(acc, StreamDelta{"Hello", {ToolCallDelta{0, "call_a", "f", "{\"x\""}}});
  append_delta(acc, StreamDelta{"", {ToolCallDelta{0, "", "", ": 1}"}, ToolCallDelta{1, "call_b", "g", ""}}});
  append_delta(acc, StreamDelta{"!", {ToolCallDelta{1, "", "", "{}"}}});
  EXPECT_EQ(acc.content, "Hello!");
  ASSERT_EQ(acc.tool_calls.size(), 2u);
  EXPECT_EQ(acc.tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(acc.tool_calls[1].name, "g");
  EXPECT_EQ(acc.tool_calls[1].arguments, "{}");
}

TEST(ToolParserStreamDeathTest, FeedAfterFinishIsABug) {
  auto p = make("hermes");
  (void)p->finish();
  EXPECT_DEATH((void)p->feed("x"), "feed after finish");
}

}  // namespace
}  // namespace kvasir::toolcall_test
