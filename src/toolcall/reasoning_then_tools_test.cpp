// How a server chains the two parsers on a reasoning model that calls tools: the reasoning parser
// sees the raw output first, and only its content goes on to the tool-call parser, so a
// <tool_call> the model mentions while thinking is never taken for a call.
#include <gtest/gtest.h>

#include "reasoning/reasoning_parser.h"
#include "toolcall/tool_parser.h"
#include "toolcall/tool_parser_test_util.h"

namespace kvasir::toolcall_test {
namespace {

struct Chained {
  std::string reasoning;
  ParsedToolCalls message;
};

Chained run_chain(std::string_view text, size_t chunk) {
  auto reasoning = std::move(make_reasoning_parser("qwen3")).value();
  auto tools = make("hermes");
  Chained out;
  auto pass = [&](const ReasoningDelta& r) {
    out.reasoning += r.reasoning;
    append_delta(out.message, tools->feed(r.content));
  };
  for (size_t i = 0; i < text.size(); i += chunk) pass(reasoning->feed(text.substr(i, chunk)));
  pass(reasoning->finish());
  append_delta(out.message, tools->finish());
  return out;
}

TEST(ReasoningThenTools, Qwen3ThinksThenCallsATool) {
  std::string text =
      "<think>\nThe user wants Paris weather. I could write <tool_call> by hand but should just call it.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  for (size_t chunk : {1, 3, 7, 1000}) {
    Chained c = run_chain(text, chunk);
    EXPECT_EQ(c.reasoning, "The user wants Paris weather. I could write <tool_call> by hand but should just call it.");
    EXPECT_EQ(c.message.content, "");
    ASSERT_EQ(c.message.tool_calls.size(), 1u);
    EXPECT_EQ(c.message.tool_calls[0].name, "get_weather");
    EXPECT_EQ(c.message.tool_calls[0].arguments, R"({"city": "Paris"})");
  }
}

}  // namespace
}  // namespace kvasir::toolcall_test
