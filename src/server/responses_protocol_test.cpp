// The Responses API as plain data: request bodies -> messages, tools, sampling and structured
// output (and the fields refused by name), output items and response objects shaped as OpenAI's,
// the typed event stream, and the bounded response store.
#include <gtest/gtest.h>

#include "server/protocol_test_util.h"
#include "server/response_store.h"
#include "server/responses_protocol.h"
#include "server/responses_stream.h"

namespace kvasir::server {
namespace {

using test_util::parse;

Status request(const std::string& body, ResponsesRequest* out) {
  return parse_responses_request(parse(body), SamplingParams(), out);
}

TEST(ResponsesProtocol, StringInputIsOneUserMessage) {
  ResponsesRequest r;
  ASSERT_TRUE(request(R"({"model": "m", "input": "hi", "instructions": "Be brief.", "max_output_tokens": 7,
                         "temperature": 0.5, "top_p": 0.9})", &r).ok());
  EXPECT_EQ(r.input.dump(), R"([{"role":"user","content":"hi"}])");
  EXPECT_EQ(r.instructions.value_or(""), "Be brief.");
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.echo.find("tool_choice")->as_string(), "auto");
  EXPECT_EQ(r.echo.find("tools")->size(), 0u);
  EXPECT_EQ(r.echo.find("text")->dump(), R"({"format":{"type":"text"}})");
  EXPECT_EQ(r.echo.find("max_output_tokens")->as_int(), 7);
  EXPECT_EQ(r.echo.find("instructions")->as_string(), "Be brief.");
  EXPECT_FALSE(r.text_format.has_value());
}

TEST(ResponsesProtocol, InputItemsBecomeChatMessages) {
  ResponsesRequest r;
  Status s = request(R"({"input": [
      {"role": "developer", "content": "Rules."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
      {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"x\":1}"},
      {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "42"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]})",
                     &r);
  ASSERT_TRUE(s.ok()) << s.message();
  const Json::Array& m = r.input.as_array();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].dump(), R"({"role":"system","content":"Rules."})");
  EXPECT_EQ(m[1].dump(), R"({"role":"user","content":"a\nb"})");
  // The reasoning item opens the assistant turn; both calls join it (vLLM).
  EXPECT_EQ(m[2].get_string("role"), "assistant");
  EXPECT_EQ(m[2].get_string("reasoning"), "hmm");
  ASSERT_EQ(m[2].find("tool_calls")->size(), 2u);
  EXPECT_EQ(m[2].find("tool_calls")->as_array()[1].find("function")->get_string("name"), "g");
  EXPECT_EQ(m[3].dump(), R"({"role":"tool","content":"42","tool_call_id":"call_1"})");
  EXPECT_EQ(m[4].dump(), R"({"role":"assistant","content":"Done."})");
}

TEST(ResponsesProtocol, UnsupportedFieldsAreRefusedByName) {
  struct Case {
    const char* body;
    const char* names;
  };
  const Case cases[] = {
      {R"({"input": "x", "frobnicate": 1})", "frobnicate"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "conversation": "conv_1"})", "conversation"},
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "web_search"},
      {R"({"input": "x", "tools": [{"type": "mcp", "server_label": "s"}]})", "mcp"},
      {R"({"input": "x", "include": ["message.output_text.logprobs"]})", "include"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "reasoning": {"summary": "auto"}})", "reasoning.summary"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})", "input_image"},
      {R"({"input": [{"type": "item_reference", "id": "msg_1"}]})", "item_reference"},
      {R"({"input": "x", "text": {"format": {"type": "grammar"}}})", "grammar"},
  };
  for (const Case& c : cases) {
    ResponsesRequest r;
    Status s = request(c.body, &r);
    EXPECT_FALSE(s.ok()) << c.body;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.message();
    EXPECT_EQ(api_error_from_status(s).status, 400) << c.body;
  }
  ResponsesRequest r;
  EXPECT_FALSE(request(R"({})", &r).ok());
  EXPECT_FALSE(request(R"({"input": 3})", &r).ok());
  EXPECT_FALSE(request(R"({"input": "x", "max_output_tokens": 0})", &r).ok());
  EXPECT_FALSE(request(R"({"input": "x", "stream_options": {}})", &r).ok());
  EXPECT_FALSE(request(R"({"input": "x", "temperature": "hot"})", &r).ok());
  EXPECT_FALSE(request(R"({"input": [{"type": "function_call", "name": "f"}]})", &r).ok());
}

TEST(ResponsesProtocol, TextFormatBecomesStructuredOutput) {
  ResponsesRequest r;
  ASSERT_TRUE(request(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "city", "strict": true,
      "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}})", &r).ok());
  ASSERT_TRUE(r.text_format.has_value());
  EXPECT_EQ(r.text_format->kind, StructuredOutputSpec::Kind::kJsonSchema);
  EXPECT_EQ(parse(r.text_format->text).find("properties")->find("name")->get_string("type"), "string");
  EXPECT_EQ(r.echo.find("text")->find("format")->get_string("name"), "city");

  ResponsesRequest j;
  ASSERT_TRUE(request(R"({"input": "x", "text": {"format": {"type": "json_object"}}})", &j).ok());
  ASSERT_TRUE(j.text_format.has_value());
  EXPECT_EQ(j.text_format->kind, StructuredOutputSpec::Kind::kJsonObject);

  ResponsesRequest t;
  ASSERT_TRUE(request(R"({"input": "x", "text": {"format": {"type": "text"}}})", &t).ok());
  EXPECT_FALSE(t.text_format.has_value());
  EXPECT_FALSE(request(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})", &t).ok());
}

TEST(ResponsesProtocol, ReasoningEffortReachesTheTemplate) {
  ResponsesRequest r;
  ASSERT_TRUE(request(R"({"input": "x", "reasoning": {"effort": "low"}})", &r).ok());
  EXPECT_EQ(r.chat_template_kwargs.get_string("reasoning_effort"), "low");
  EXPECT_EQ(r.echo.find("reasoning")->get_string("effort"), "low");
}

TEST(ResponsesProtocol, OutputItemsAndResponseObjectMatchOpenAI) {
  ParsedOutput out;
  out.reasoning = "think";
  out.content = "Hello";
  out.tool_calls.push_back(ToolCall{"call_1", "f", "{}"});
  Json items = output_items(out);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items.as_array()[0].get_string("type"), "reasoning");
  EXPECT_EQ(items.as_array()[0].find("content")->as_array()[0].get_string("type"), "reasoning_text");
  const Json& msg = items.as_array()[1];
  EXPECT_EQ(msg.get_string("type"), "message");
  EXPECT_EQ(msg.get_string("role"), "assistant");
  EXPECT_EQ(msg.get_string("id").rfind("msg_", 0), 0u);
  EXPECT_EQ(msg.find("content")->as_array()[0].dump(), R"({"type":"output_text","text":"Hello","annotations":[],"logprobs":[]})");
  const Json& call = items.as_array()[2];
  EXPECT_EQ(call.get_string("type"), "function_call");
  EXPECT_EQ(call.get_string("call_id"), "call_1");
  EXPECT_EQ(call.get_string("arguments"), "{}");
  EXPECT_EQ(call.get_string("id").rfind("fc_", 0), 0u);

  ParsedOutput only_calls;
  only_calls.tool_calls.push_back(ToolCall{"call_2", "g", "{}"});
  EXPECT_EQ(output_items(only_calls).size(), 1u);
  EXPECT_EQ(output_items(ParsedOutput()).as_array()[0].get_string("type"), "message");  // an empty message

  ResponsesRequest r;
  ASSERT_TRUE(request(R"({"input": "x", "metadata": {"k": "v"}})", &r).ok());
  ResponseState s;
  s.id = "resp_1";
  s.created_at = 5;
  s.model = "m";
  s.status = "incomplete";
  s.output = items;
  s.usage = response_usage_json(ResponseUsage{10, 2, 3, 1});
  Json o = response_object(s, r.echo);
  for (const char* k : {"id", "object", "created_at", "error", "incomplete_details", "instructions", "model", "tools",
                        "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"}) {
    EXPECT_TRUE(o.contains(k)) << k;  // the spec's required fields
  }
  EXPECT_EQ(o.get_string("object"), "response");
  EXPECT_EQ(o.find("incomplete_details")->get_string("reason"), "max_output_tokens");
  EXPECT_EQ(o.find("metadata")->get_string("k"), "v");
  EXPECT_EQ(o.find("usage")->get_int("total_tokens", 0), 13);
  EXPECT_EQ(o.find("usage")->find("input_tokens_details")->get_int("cached_tokens", -1), 2);
  EXPECT_EQ(o.find("usage")->find("output_tokens_details")->get_int("reasoning_tokens", -1), 1);

  ApiError e = response_not_found_error("resp_x", "previous_response_id");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_EQ(e.message, "Previous response with id 'resp_x' not found.");
}

// The events of a stream, parsed back from SSE text.
std::vector<Json> events_of(const std::string& sse) {
  std::vector<Json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    out.push_back(parse(sse.substr(pos + 6, end - pos - 6)));
    // The event line names the same type as the data.
    const size_t line = sse.rfind("event: ", pos);
    EXPECT_EQ(sse.substr(line + 7, pos - line - 8), out.back().get_string("type"));
    pos = end;
  }
  return out;
}

TEST(ResponsesStream, EventsFollowOpenAIsOrderAndNumbering) {
  ResponseEventStream s;
  Json in_progress = Json::object();
  in_progress.set("status", "in_progress");
  std::string sse = s.begin(in_progress);
  OutputDelta a;
  a.reasoning = "Let me ";
  sse += s.add(a);
  OutputDelta b;
  b.reasoning = "see.";
  b.content = "Hi";
  sse += s.add(b);
  OutputDelta c;
  c.content = "!";
  c.tool_calls.push_back(ToolCallDelta{0, "call_a", "f", "{\"x\""});
  sse += s.add(c);
  OutputDelta d;
  d.tool_calls.push_back(ToolCallDelta{0, "", "", ": 1}"});
  d.tool_calls.push_back(ToolCallDelta{1, "call_b", "g", ""});
  sse += s.add(d);
  sse += s.finish_items();
  Json done = Json::object();
  done.set("status", "completed");
  done.set("output", s.output());
  sse += s.end(done);

  std::vector<Json> ev = events_of(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].get_int("sequence_number", -1), static_cast<int64_t>(i));
    types.push_back(ev[i].get_string("type"));
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  ASSERT_EQ(s.output().size(), 4u);
  EXPECT_EQ(s.output().as_array()[0].find("content")->as_array()[0].get_string("text"), "Let me see.");
  EXPECT_EQ(s.output().as_array()[1].find("content")->as_array()[0].get_string("text"), "Hi!");
  EXPECT_EQ(s.output().as_array()[2].get_string("arguments"), "{\"x\": 1}");
  EXPECT_EQ(s.output().as_array()[2].get_string("call_id"), "call_a");
  EXPECT_EQ(s.output().as_array()[3].get_string("name"), "g");
  EXPECT_EQ(s.reasoning_text(), "Let me see.");
  // Item ids and output indexes agree between an item's events.
  EXPECT_EQ(ev[2].find("item")->get_string("id"), ev[4].get_string("item_id"));
  EXPECT_EQ(ev[16].get_int("output_index", -1), 2);
}

TEST(ResponsesStream, NothingGeneratedStillEndsWithAMessage) {
  ResponseEventStream s;
  std::string sse = s.begin(Json::object()) + s.finish_items();
  ASSERT_EQ(s.output().size(), 1u);
  EXPECT_EQ(s.output().as_array()[0].get_string("type"), "message");
  Json failed = Json::object();
  failed.set("status", "failed");
  std::vector<Json> ev = events_of(sse + s.end(failed));
  EXPECT_EQ(ev.back().get_string("type"), "response.failed");
}

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinBothBounds) {
  ResponseStore store(2, 1 << 20);
  auto entry = [](const std::string& text) { return ResponseStore::Entry{Json::array(), Json(text)}; };
  EXPECT_TRUE(store.put("a", entry("1")));
  EXPECT_TRUE(store.put("b", entry("2")));
  ASSERT_TRUE(store.get("a").has_value());  // a is now the most recent
  store.put("c", entry("3"));
  EXPECT_FALSE(store.get("b").has_value());
  EXPECT_EQ(store.get("a")->response.as_string(), "1");
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.size(), 1u);

  ResponseStore small(100, 64);
  EXPECT_FALSE(small.put("big", entry(std::string(100, 'x'))));  // alone over the byte bound
  EXPECT_TRUE(small.put("x", entry(std::string(20, 'x'))));
  EXPECT_TRUE(small.put("y", entry(std::string(20, 'y'))));
  EXPECT_TRUE(small.put("z", entry(std::string(20, 'z'))));
  EXPECT_LE(small.bytes(), 64u);
  EXPECT_FALSE(small.get("x").has_value());
  EXPECT_TRUE(small.get("z").has_value());

  ResponseStore off(0, 1 << 20);
  EXPECT_FALSE(off.put("a", entry("1")));
}

}  // namespace
}  // namespace kvasir::server
