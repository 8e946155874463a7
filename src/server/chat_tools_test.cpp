// Tool requests as vLLM validates them (tools, tool_choice, parallel_tool_calls, the 400 for
// "auto" without a parser), the grammar schemas for "required" and a named function, reading
// grammar-forced output back as calls (whole and streamed), and assistant tool_calls prepared
// for chat templates.
#include <gtest/gtest.h>

#include <set>

#include "server/chat_output_parser.h"
#include "server/chat_tools.h"
#include "server/forced_tool_calls.h"
#include "server/openai_protocol.h"
#include "server/protocol_test_util.h"

namespace kvasir::server {
namespace {

using test_util::parse;

const char* kWeather =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";
const char* kTime = R"({"type": "function", "function": {"name": "get_time"}})";

ChatTools chat_tools(const std::string& body, Status* st = nullptr) {
  ChatTools t;
  Status s = parse_chat_tools(parse(body), &t);
  if (st) *st = s;
  else EXPECT_TRUE(s.ok()) << s.message();
  return t;
}

std::string tools_body(const std::string& extra) {
  return std::string(R"({"tools": [)") + kWeather + "," + kTime + "]" + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(ChatTools, ToolChoiceDefaultsToAutoWithToolsAndNoneWithout) {
  EXPECT_EQ(chat_tools(tools_body("")).choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(chat_tools("{}").choice.mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(chat_tools(R"({"tools": []})").choice.mode, ToolChoice::Mode::kNone);
  ChatTools t = chat_tools(tools_body(R"("tool_choice": "none", "parallel_tool_calls": false)"));
  EXPECT_EQ(t.choice.mode, ToolChoice::Mode::kNone);
  EXPECT_FALSE(t.parallel_tool_calls);
  EXPECT_TRUE(t.has_tools());
  ChatTools named = chat_tools(tools_body(R"("tool_choice": {"type": "function", "function": {"name": "get_time"}})"));
  EXPECT_EQ(named.choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.choice.name, "get_time");
}

TEST(ChatTools, RefusesBadToolsAndChoicesWithVllmMessages) {
  Status s;
  chat_tools(R"({"tool_choice": "required"})", &s);
  EXPECT_EQ(s.message(), "When using `tool_choice`, `tools` must be set.");
  chat_tools(tools_body(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})"), &s);
  EXPECT_EQ(s.message(), "The tool specified in `tool_choice` does not match any of the specified `tools`");
  chat_tools(tools_body(R"("tool_choice": "sometimes")"), &s);
  EXPECT_NE(s.message().find("Invalid value for `tool_choice`"), std::string::npos);
  chat_tools(tools_body(R"("tool_choice": {"type": "function"})"), &s);
  EXPECT_FALSE(s.ok());
  chat_tools(R"({"tools": [{"type": "function"}]})", &s);
  EXPECT_NE(s.message().find("tools[0].function"), std::string::npos);
  chat_tools(R"({"tools": [{"type": "function", "function": {"name": 3}}]})", &s);
  EXPECT_NE(s.message().find("tools[0].function.name"), std::string::npos);
  chat_tools(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})", &s);
  EXPECT_NE(s.message().find("parameters"), std::string::npos);
  chat_tools(R"({"tools": [{"type": "web_search"}]})", &s);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("web_search"), std::string::npos);
  chat_tools(tools_body(R"("parallel_tool_calls": "yes")"), &s);
  EXPECT_NE(s.message().find("parallel_tool_calls"), std::string::npos);
}

TEST(ChatTools, RequiredWithNoToolsBehavesLikeNone) {
  ChatTools t = chat_tools(R"({"tools": [], "tool_choice": "required"})");
  EXPECT_EQ(t.choice.mode, ToolChoice::Mode::kNone);
  EXPECT_FALSE(t.has_tools());
}

TEST(ChatTools, AutoNeedsAToolParserAsVllmSays) {
  ChatTools t = chat_tools(tools_body(""));
  Status s = check_tool_choice_supported(t, /*auto_tools_enabled=*/false);
  EXPECT_EQ(s.message(), "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  EXPECT_EQ(api_error_from_status(s).status, 400);
  EXPECT_TRUE(check_tool_choice_supported(t, true).ok());
  EXPECT_TRUE(check_tool_choice_supported(chat_tools(tools_body(R"("tool_choice": "required")")), false).ok());
  EXPECT_TRUE(check_tool_choice_supported(chat_tools(tools_body(R"("tool_choice": "none")")), false).ok());
}

TEST(ChatTools, NoneStillRendersToolsUnlessExcluded) {
  ChatTools t = chat_tools(tools_body(R"("tool_choice": "none")"));
  EXPECT_EQ(tools_for_template(t, false).size(), 2u);
  EXPECT_TRUE(tools_for_template(t, true).is_null());
  EXPECT_TRUE(tools_for_template(chat_tools("{}"), false).is_null());
}

TEST(ChatTools, RequiredSchemaIsAnArrayOfNamedCalls) {
  auto spec = tool_choice_structured_output(chat_tools(tools_body(R"("tool_choice": "required")")));
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(spec->has_value());
  EXPECT_EQ((*spec)->kind, StructuredOutputSpec::Kind::kJsonSchema);
  Json schema = parse((*spec)->text);
  EXPECT_EQ(schema.get_string("type"), "array");
  EXPECT_EQ(schema.get_int("minItems", 0), 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  const Json& any_of = *schema.find("items")->find("anyOf");
  ASSERT_EQ(any_of.size(), 2u);
  const Json& first = any_of.as_array()[0];
  EXPECT_EQ(first.find("properties")->find("name")->find("enum")->as_array()[0].as_string(), "get_weather");
  EXPECT_EQ(first.find("properties")->find("parameters")->find("required")->as_array()[0].as_string(), "city");
  // A tool without parameters gets an empty object schema (vLLM).
  EXPECT_EQ(any_of.as_array()[1].find("properties")->find("parameters")->dump(), R"({"type":"object","properties":{}})");

  auto single = tool_choice_structured_output(chat_tools(tools_body(R"("tool_choice": "required", "parallel_tool_calls": false)")));
  ASSERT_TRUE(single.ok() && single->has_value());
  EXPECT_EQ(parse((*single)->text).get_int("maxItems", 0), 1);
}

TEST(ChatTools, RequiredSchemaHoistsDefsAndRefusesConflicts) {
  const char* body = R"({"tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "$defs": {"P": {"type": "string"}},
                                                                     "properties": {"x": {"$ref": "#/$defs/P"}}}}},
      {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "$defs": {"P": {"type": "string"}}}}}]})";
  auto spec = tool_choice_structured_output(chat_tools(body));
  ASSERT_TRUE(spec.ok() && spec->has_value());
  Json schema = parse((*spec)->text);
  EXPECT_EQ(schema.find("$defs")->find("P")->get_string("type"), "string");
  EXPECT_FALSE(schema.find("items")->find("anyOf")->as_array()[0].find("properties")->find("parameters")->contains("$defs"));

  const char* clash = R"({"tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "a", "parameters": {"$defs": {"P": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "b", "parameters": {"$defs": {"P": {"type": "integer"}}}}}]})";
  auto bad = tool_choice_structured_output(chat_tools(clash));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'P' has multiple schemas"), std::string::npos);
}

TEST(ChatTools, NamedSchemaIsTheFunctionsParameters) {
  auto spec = tool_choice_structured_output(
      chat_tools(tools_body(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})")));
  ASSERT_TRUE(spec.ok() && spec->has_value());
  EXPECT_EQ(parse((*spec)->text).find("properties")->find("city")->get_string("type"), "string");
  auto none = tool_choice_structured_output(chat_tools(tools_body("")));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(ChatTools, ResponsesFlatToolsBecomeChatTools) {
  ChatTools t;
  ASSERT_TRUE(parse_responses_tools(parse(R"({"tools": [{"type": "function", "name": "f", "strict": true,
      "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "f"}})"), &t).ok());
  ASSERT_TRUE(t.has_tools());
  EXPECT_EQ(t.tools.as_array()[0].find("function")->get_string("name"), "f");
  EXPECT_TRUE(t.tools.as_array()[0].find("function")->get_bool("strict", false));
  EXPECT_EQ(t.choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(tool_choice_json(t.choice, true).dump(), R"({"type":"function","name":"f"})");
  EXPECT_EQ(tool_choice_json(t.choice, false).dump(), R"({"type":"function","function":{"name":"f"}})");

  ChatTools u;
  ASSERT_TRUE(parse_responses_tools(parse(R"({"tool_choice": "auto"})"), &u).ok());
  EXPECT_EQ(u.choice.mode, ToolChoice::Mode::kNone);  // the Responses default asks for nothing

  ChatTools v;
  Status s = parse_responses_tools(parse(R"({"tools": [{"type": "file_search", "vector_store_ids": []}]})"), &v);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("file_search"), std::string::npos);
  s = parse_responses_tools(parse(R"({"tools": [{"type": "function", "name": "f"}],
      "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}})"), &v);
  EXPECT_NE(s.message().find("allowed_tools"), std::string::npos);
}

TEST(ChatTools, AssistantToolCallArgumentsReachTemplatesAsObjects) {
  auto m = normalize_chat_messages_for_template(parse(R"([
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
          {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "42"}])"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Json& calls = *m->as_array()[1].find("tool_calls");
  EXPECT_EQ(calls.as_array()[0].find("function")->find("arguments")->get_int("x", 0), 1);
  EXPECT_EQ(calls.as_array()[1].find("function")->find("arguments")->dump(), "{}");
  EXPECT_EQ(m->as_array()[2].get_string("tool_call_id"), "call_1");

  auto bad = normalize_chat_messages_for_template(parse(R"([{"role": "assistant", "tool_calls": [
      {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}])"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos);
}

TEST(ForcedToolCalls, RequiredOutputParsesIntoCallsWithRawArguments) {
  const std::string text = R"( [{"name": "get_weather", "parameters": {"city": "Paris"}},
                                {"parameters": {}, "name": "get_time"}] )";
  auto calls = parse_required_calls(text);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].name, "get_weather");
  EXPECT_EQ((*calls)[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ((*calls)[1].name, "get_time");
  EXPECT_EQ((*calls)[1].arguments, "{}");
  EXPECT_EQ((*calls)[0].id.rfind("call_", 0), 0u);
  EXPECT_NE((*calls)[0].id, (*calls)[1].id);

  EXPECT_FALSE(parse_required_calls("Sure! Here you go").has_value());
  EXPECT_FALSE(parse_required_calls(R"([{"name": "f", "parameters": {"a": )").has_value());  // cut off
  EXPECT_FALSE(parse_required_calls("[]").has_value());
  EXPECT_FALSE(parse_required_calls(R"([{"name": "f", "parameters": {"a": tru}}])").has_value());
}

// Streams `text` in pieces of `step` bytes; returns the reassembled calls.
std::vector<ToolCall> stream_forced(const std::string& named, const std::string& text, size_t step, std::string* content) {
  ForcedToolCallStream s(named);
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < text.size(); i += step) {
    for (const ToolCallDelta& d : s.add(std::string_view(text).substr(i, step), content)) {
      if (!d.id.empty()) {
        EXPECT_EQ(static_cast<size_t>(d.index), calls.size());
        calls.push_back(ToolCall{d.id, d.name, ""});
      }
      EXPECT_LT(static_cast<size_t>(d.index), calls.size());
      calls[static_cast<size_t>(d.index)].arguments += d.arguments;
    }
  }
  return calls;
}

TEST(ForcedToolCalls, StreamedArgumentsConcatenateToTheWholeParse) {
  const std::string text = R"([{"name": "get_weather", "parameters": {"city": "Pa\"ris", "days": [1, 2]}}, {"name": "get_time", "parameters": {"tz": 12}}])";
  auto whole = parse_required_calls(text);
  ASSERT_TRUE(whole.has_value());
  for (size_t step : {1u, 2u, 7u, 1000u}) {
    std::string content;
    std::vector<ToolCall> calls = stream_forced("", text, step, &content);
    ASSERT_EQ(calls.size(), whole->size()) << step;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].name, (*whole)[i].name);
      EXPECT_EQ(calls[i].arguments, (*whole)[i].arguments) << step;
    }
    EXPECT_EQ(content, "");
  }
}

TEST(ForcedToolCalls, StreamOfPlainTextFallsBackToContent) {
  std::string content;
  std::vector<ToolCall> calls = stream_forced("", "Hello there", 3, &content);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "Hello there");
}

TEST(ForcedToolCalls, NamedStreamIsOneCallWhoseArgumentsAreTheOutput) {
  std::string content;
  std::vector<ToolCall> calls = stream_forced("get_weather", R"({"city": "Oslo"})", 4, &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city": "Oslo"})");
}

TEST(ChatOutputParser, FinishReasonFollowsVllm) {
  OutputParserConfig none;
  ChatTools required = chat_tools(tools_body(R"("tool_choice": "required")"));
  auto p = ChatOutputParser::create(none, required);
  ASSERT_TRUE(p.ok());
  ParsedOutput out = (*p)->parse(R"([{"name": "get_time", "parameters": {}}])");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_FALSE(out.content.has_value());
  EXPECT_EQ((*p)->finish_reason("stop"), "tool_calls");
  EXPECT_EQ((*p)->finish_reason("length"), "length");

  ChatTools named = chat_tools(tools_body(R"("tool_choice": {"type": "function", "function": {"name": "get_time"}})"));
  auto q = ChatOutputParser::create(none, named);
  ASSERT_TRUE(q.ok());
  out = (*q)->parse("{}");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_time");
  EXPECT_EQ((*q)->finish_reason("stop"), "stop");  // OpenAI and vLLM: a forced function is a normal stop

  auto plain = ChatOutputParser::create(none, chat_tools(tools_body(R"("tool_choice": "none")")));
  ASSERT_TRUE(plain.ok());
  OutputDelta d = (*plain)->add("<tool_call>", false);
  EXPECT_EQ(d.content, "<tool_call>");
  EXPECT_FALSE(output_needs_parsing(none, chat_tools(tools_body(R"("tool_choice": "none")"))));
}

// What a stream's deltas carried, joined (the last call's name).
struct Streamed {
  std::string reasoning, content, name, arguments;
};

// Feeds `text` in pieces of `step` bytes, the last one marked final.
Streamed stream_in_pieces(ChatOutputParser& p, std::string_view text, size_t step) {
  Streamed got;
  for (size_t i = 0; i < text.size(); i += step) {
    OutputDelta d = p.add(text.substr(i, step), i + step >= text.size());
    got.reasoning += d.reasoning;
    got.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!t.name.empty()) got.name = t.name;
      got.arguments += t.arguments;
    }
  }
  return got;
}

TEST(ChatOutputParser, RequiredOutputThatIsNotCallsStaysContent) {
  auto p = ChatOutputParser::create(OutputParserConfig(), chat_tools(tools_body(R"("tool_choice": "required")")));
  ASSERT_TRUE(p.ok());
  ParsedOutput out = (*p)->parse("I cannot call tools.");
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content.value_or(""), "I cannot call tools.");
  EXPECT_EQ((*p)->finish_reason("stop"), "stop");
}

TEST(ChatOutputParser, AutoRunsTheToolParserWholeAndStreamed) {
  OutputParserConfig c;
  c.enable_auto_tool_choice = true;
  c.tool_call_parser = "hermes";
  ASSERT_TRUE(check_output_parser_config(c).ok());
  ChatTools tools = chat_tools(tools_body(""));
  ASSERT_TRUE(output_needs_parsing(c, tools));
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  auto whole = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(whole.ok());
  ParsedOutput out = (*whole)->parse(text);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(out.content.value_or(""), "Let me check.");
  EXPECT_EQ((*whole)->finish_reason("stop"), "tool_calls");

  auto streamed = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(streamed.ok());
  Streamed got = stream_in_pieces(**streamed, text, 3);
  EXPECT_EQ(got.content, "Let me check.");
  EXPECT_EQ(got.name, "get_weather");
  EXPECT_EQ(got.arguments, R"({"city": "Paris"})");
  EXPECT_EQ((*streamed)->finish_reason("stop"), "tool_calls");

  auto plain = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(plain.ok());
  ParsedOutput no_calls = (*plain)->parse("Just text.");
  EXPECT_TRUE(no_calls.tool_calls.empty());
  EXPECT_EQ(no_calls.content.value_or(""), "Just text.");
  EXPECT_EQ((*plain)->finish_reason("stop"), "stop");
}

TEST(ChatOutputParser, ReasoningIsSplitOffBeforeToolCalls) {
  OutputParserConfig c;
  c.enable_auto_tool_choice = true;
  c.tool_call_parser = "hermes";
  c.reasoning_parser = "deepseek_r1";
  ASSERT_TRUE(check_output_parser_config(c).ok());
  ChatTools tools = chat_tools(tools_body(""));
  const std::string text =
      "I should look it up.</think>\n\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>";
  auto whole = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE((*whole)->has_reasoning_parser());
  ParsedOutput out = (*whole)->parse(text);
  EXPECT_EQ(out.reasoning.value_or(""), "I should look it up.");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"tz": "UTC"})");
  EXPECT_FALSE(out.content.has_value());

  auto streamed = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(streamed.ok());
  Streamed got = stream_in_pieces(**streamed, text, 5);
  EXPECT_EQ(got.reasoning, "I should look it up.");
  EXPECT_EQ(got.content, "");
  EXPECT_EQ(got.name, "get_time");
  EXPECT_EQ(got.arguments, R"({"tz": "UTC"})");
  EXPECT_EQ((*streamed)->finish_reason("stop"), "tool_calls");

  // All reasoning (no closing tag): content is null, as vLLM answers.
  auto open = ChatOutputParser::create(c, chat_tools("{}"));
  ASSERT_TRUE(open.ok());
  ParsedOutput all = (*open)->parse("still thinking");
  EXPECT_EQ(all.reasoning.value_or(""), "still thinking");
  EXPECT_FALSE(all.content.has_value());
}

TEST(ChatOutputParser, Qwen3WithoutThinkTagsIsAllContent) {
  OutputParserConfig c;
  c.reasoning_parser = "qwen3";
  auto p = ChatOutputParser::create(c, chat_tools("{}"));
  ASSERT_TRUE(p.ok());
  ParsedOutput out = (*p)->parse("Hello.");
  EXPECT_FALSE(out.reasoning.has_value());
  EXPECT_EQ(out.content.value_or(""), "Hello.");
  auto q = ChatOutputParser::create(c, chat_tools("{}"));
  ParsedOutput think = (*q)->parse("<think>\nhm\n</think>\n\nHi");
  EXPECT_EQ(think.reasoning.value_or(""), "hm");
  EXPECT_EQ(think.content.value_or(""), "Hi");
  // enable_thinking false: no reasoning at all.
  Json kwargs = Json::object();
  kwargs.set("enable_thinking", false);
  auto off = ChatOutputParser::create(c, chat_tools("{}"), ReasoningContext::of(kwargs, "<|im_start|>assistant\n"));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->parse("<think>x</think>y").reasoning.has_value());
}

TEST(ChatOutputParser, ParallelToolCallsFalseKeepsTheFirstCall) {
  OutputParserConfig c;
  c.enable_auto_tool_choice = true;
  c.tool_call_parser = "hermes";
  ChatTools tools = chat_tools(tools_body(R"("parallel_tool_calls": false)"));
  const std::string text =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n</tool_call>";
  auto whole = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(whole.ok());
  ParsedOutput out = (*whole)->parse(text);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_time");
  auto streamed = ChatOutputParser::create(c, tools);
  ASSERT_TRUE(streamed.ok());
  std::set<int> indexes;
  for (size_t i = 0; i < text.size(); i += 4) {
    for (const ToolCallDelta& d : (*streamed)->add(std::string_view(text).substr(i, 4), i + 4 >= text.size()).tool_calls) {
      indexes.insert(d.index);
    }
  }
  EXPECT_EQ(indexes, std::set<int>{0});
  EXPECT_EQ((*streamed)->finish_reason("stop"), "tool_calls");
}

TEST(ChatOutputParser, ServeFlagsAreCheckedAtStartup) {
  OutputParserConfig c;
  EXPECT_TRUE(check_output_parser_config(c).ok());
  c.enable_auto_tool_choice = true;
  EXPECT_EQ(check_output_parser_config(c).message(), "--enable-auto-tool-choice requires --tool-call-parser");
  c.tool_call_parser = "no_such_parser";
  Status s = check_output_parser_config(c);
  EXPECT_NE(s.message().find("--tool-call-parser"), std::string::npos);
  EXPECT_NE(s.message().find("no_such_parser"), std::string::npos);
  OutputParserConfig r;
  r.reasoning_parser = "no_such_parser";
  EXPECT_NE(check_output_parser_config(r).message().find("--reasoning-parser"), std::string::npos);
}

}  // namespace
}  // namespace kvasir::server
