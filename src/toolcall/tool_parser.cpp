#include "toolcall/tool_parser.h"

#include <algorithm>
#include <utility>

#include "toolcall/parsers.h"
#include "toolcall/tool_call_id.h"

namespace kvasir {

Json ToolCall::to_json() const {
  Json fn = Json::object();
  fn.set("name", name);
  fn.set("arguments", arguments);
  Json j = Json::object();
  j.set("id", id);
  j.set("type", "function");
  j.set("function", std::move(fn));
  return j;
}

Json ToolCallDelta::to_json() const {
  Json fn = Json::object();
  if (is_first()) fn.set("name", name);
  fn.set("arguments", arguments);
  Json j = Json::object();
  j.set("index", index);
  if (is_first()) {
    j.set("id", id);
    j.set("type", "function");
  }
  j.set("function", std::move(fn));
  return j;
}

void append_delta(ParsedToolCalls& acc, const StreamDelta& delta) {
  acc.content += delta.content;
  for (const ToolCallDelta& d : delta.tool_calls) {
    if (d.index < 0) continue;
    auto i = static_cast<size_t>(d.index);
    if (d.is_first()) {
      if (acc.tool_calls.size() <= i) acc.tool_calls.resize(i + 1);
      acc.tool_calls[i] = ToolCall{d.id, d.name, d.arguments};
    } else if (i < acc.tool_calls.size()) {
      acc.tool_calls[i].arguments += d.arguments;
    }
  }
}

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<ToolParser> (*make)(uint64_t seed);
};

// The one list of tool-call parsers (aliases point at the same maker).
constexpr Entry kParsers[] = {
    {"deepseek_v3", toolcall::make_deepseek_v3_tool_parser},
    {"hermes", toolcall::make_hermes_tool_parser},
    {"llama3_json", toolcall::make_llama3_json_tool_parser},
    {"llama4_json", toolcall::make_llama3_json_tool_parser},
    {"mistral", toolcall::make_mistral_tool_parser},
    {"pythonic", toolcall::make_pythonic_tool_parser},
};

}  // namespace

std::vector<std::string> tool_parser_names() {
  std::vector<std::string> names;
  for (const Entry& e : kParsers) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::unique_ptr<ToolParser>> make_tool_parser(std::string_view name) {
  for (const Entry& e : kParsers) {
    if (name == e.name) return e.make(toolcall::random_seed());
  }
  std::string list;
  for (const std::string& n : tool_parser_names()) list += (list.empty() ? "" : ", ") + n;
  return invalid_argument("unknown tool-call parser '" + std::string(name) + "'; supported: " + list);
}

}  // namespace kvasir
