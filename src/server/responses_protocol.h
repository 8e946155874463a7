// The OpenAI Responses API (/v1/responses) as plain data, both halves: a request body -> chat
// messages, tools, sampling parameters and a structured-output spec (every field checked; fields
// the server does not implement are refused by name, never ignored); and the parsed output of a
// generation -> the response object and its output items. Pure functions of JSON; must not touch
// the engine, templates or sockets (serving_responses.cpp does), so it is unit-testable on strings.
#pragma once

#include <optional>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "core/structured_output_spec.h"
#include "server/chat_output_parser.h"
#include "server/chat_tools.h"
#include "server/openai_protocol.h"

namespace kvasir::server {

struct ResponsesRequest : GenerationRequestBase {
  std::optional<std::string> instructions;  // a system message first; not carried to later turns
  Json input;                               // the new turn as OpenAI chat messages (not normalized)
  ChatTools tools;
  std::optional<StructuredOutputSpec> text_format;  // text.format json_schema / json_object
  std::string previous_response_id;                 // empty: none
  bool store = true;
  Json chat_template_kwargs;  // null or an object (reasoning.effort -> reasoning_effort)
  // The request's own fields a response object repeats: instructions, max_output_tokens,
  // metadata, parallel_tool_calls, previous_response_id, reasoning, store, temperature, text,
  // tool_choice, tools, top_p, truncation, user, ...
  Json echo = Json::object();
};

// `defaults` are the server's sampling defaults (generation config) that fields override.
Status parse_responses_request(const Json& body, const SamplingParams& defaults, ResponsesRequest* out);

// Responses input items (or a stored response's output items) -> OpenAI chat messages: message
// items by role (developer -> system), function_call items -> the assistant's tool_calls (merged
// into the assistant message before them, as vLLM does), function_call_output -> a "tool"
// message, reasoning -> the assistant's "reasoning". `skip_reasoning` drops reasoning items
// (vLLM does for a previous response's output).
Status responses_items_to_messages(const Json& items, bool skip_reasoning, Json* messages);

// text.format -> the structured output it asks for: {"type": "text"} -> none, {"type":
// "json_object"} -> any JSON object, {"type": "json_schema", "name", "schema", "strict"} -> that
// schema (its JSON text). Other types are refused.
StatusOr<std::optional<StructuredOutputSpec>> structured_output_from_text_format(const Json& format);

// Output items.
Json reasoning_item(const std::string& id, const std::string& text, const char* status);
Json output_text_part(const std::string& text);
Json message_item(const std::string& id, const std::string& text, const char* status);
Json function_call_item(const std::string& id, const ToolCall& call, const char* status);
// A whole output as items: reasoning, then the message (when there is text, or when there is
// nothing else), then the calls.
Json output_items(const ParsedOutput& out);

struct ResponseUsage {
  int64_t input_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t output_tokens = 0;
  int64_t reasoning_tokens = 0;
};
Json response_usage_json(const ResponseUsage& u);

// The response object: `echo` (ResponsesRequest::echo) plus id, object, created_at, model,
// status ("in_progress" | "completed" | "incomplete" | "failed"), output, usage (absent while in
// progress), error, incomplete_details (reason max_output_tokens when incomplete).
struct ResponseState {
  std::string id;
  int64_t created_at = 0;
  std::string model;
  std::string status = "in_progress";
  Json output = Json::array();
  Json usage;         // null until done
  Json error;         // null, or {"code", "message"} when failed
};
Json response_object(const ResponseState& state, const Json& echo);

// 404 for an unknown previous_response_id / response id, as OpenAI words it.
ApiError response_not_found_error(const std::string& id, const char* param);

}  // namespace kvasir::server
