// The tools of a generation request as vLLM reads them: the validated `tools` list (chat shape
// {"type": "function", "function": {...}}, also built from the Responses API's flat tools), the
// tool_choice mode and parallel_tool_calls; and, for tool_choice "required" or a named function,
// the JSON schema that makes the grammar force valid calls. Pure functions of the request JSON;
// must not render templates, parse model output (chat_output_parser does) or touch the engine.
#pragma once

#include <optional>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "core/structured_output_spec.h"

namespace kvasir::server {

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string name;  // kNamed: the function that must be called
};

struct ChatTools {
  // null, or the tools in chat shape: [{"type": "function", "function": {"name", ...}}].
  Json tools;
  ToolChoice choice;  // defaults to auto when tools are given, else none (vLLM, OpenAI)
  bool parallel_tool_calls = true;
  bool has_tools() const { return tools.is_array() && tools.size() > 0; }
};

// /v1/chat/completions: reads tools, tool_choice and parallel_tool_calls from the body. Errors
// as vLLM's request validator words them (an unknown named function, tool_choice without tools).
Status parse_chat_tools(const Json& body, ChatTools* out);
// /v1/responses: the flat function tools {"type": "function", "name", "parameters", ...} and
// tool_choice {"type": "function", "name"}; built-in tools (web_search, file_search, mcp, ...)
// are refused by name.
Status parse_responses_tools(const Json& body, ChatTools* out);

// vLLM: tool_choice "auto" needs a tool parser (--enable-auto-tool-choice --tool-call-parser);
// without one it is a 400 naming the flags instead of tools the server would never parse.
Status check_tool_choice_supported(const ChatTools& tools, bool auto_tools_enabled);

// What the chat template sees as `tools`: null without tools, or with tool_choice "none" when
// the server excludes them then (--exclude-tools-when-tool-choice-none); otherwise the list.
Json tools_for_template(const ChatTools& tools, bool exclude_tools_when_tool_choice_none);

// The structured output forcing tool calls (vLLM's _get_json_schema_from_tool): "required" -> a
// JSON array (minItems 1; maxItems 1 when parallel_tool_calls is false) of
// {"name": <one tool's name>, "parameters": <that tool's schema>}, the tools' "$defs" hoisted to
// the top; a named function -> its parameters schema. nullopt for "none" and "auto".
StatusOr<std::optional<StructuredOutputSpec>> tool_choice_structured_output(const ChatTools& tools);

// The chat-shape tool_choice echoed in responses: "none" | "auto" | "required" | {"type":
// "function", "function": {"name"}} (chat) or {"type": "function", "name"} (responses).
Json tool_choice_json(const ToolChoice& choice, bool responses_shape);

}  // namespace kvasir::server
