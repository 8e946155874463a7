#include "server/chat_tools.h"

#include <array>

namespace kvasir::server {
namespace {

const char* const kBuiltinToolTypes[] = {
    "web_search",         "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
    "file_search",        "code_interpreter",   "computer_use_preview",          "computer_use",
    "mcp",                "image_generation",   "local_shell",                   "shell",
    "custom",             "apply_patch",        "function_shell",                "namespace",
};

std::string at(const char* field, size_t i) { return std::string(field) + "[" + std::to_string(i) + "]"; }

// obj[key] when it is there and not null (null means absent in these APIs).
const Json* given(const Json& obj, const char* key) {
  const Json* v = obj.find(key);
  return v && !v->is_null() ? v : nullptr;
}

// The function object's own fields: name (non-empty string), description (string), parameters
// (an object: the JSON schema of the arguments), strict (bool). `where` names it in messages.
Status check_function(const Json& fn, const std::string& where) {
  const Json* name = fn.find("name");
  if (!name || !name->is_string() || name->as_string().empty()) {
    return invalid_argument("'" + where + ".name' must be a non-empty string");
  }
  if (const Json* d = given(fn, "description"); d && !d->is_string()) {
    return invalid_argument("'" + where + ".description' must be a string");
  }
  if (const Json* p = given(fn, "parameters"); p && !p->is_object()) {
    return invalid_argument("'" + where + ".parameters' must be an object (a JSON schema)");
  }
  if (const Json* s = given(fn, "strict"); s && !s->is_bool()) {
    return invalid_argument("'" + where + ".strict' must be a boolean");
  }
  return Status();
}

Status unsupported_tool_type(const std::string& type) {
  for (const char* b : kBuiltinToolTypes) {
    if (type == b) {
      return unimplemented("tool type '" + type + "' is not supported: this server has no built-in tools; only 'function' tools are");
    }
  }
  return invalid_argument("tool type '" + type + "' is not supported; only 'function' tools are");
}

const Json* find_tool(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const Json& t : tools.as_array()) {
    const Json* fn = t.find("function");
    if (fn && fn->get_string("name") == name) return fn;
  }
  return nullptr;
}

// tool_choice as a string; false when it is none of the three.
bool mode_from_string(const std::string& s, ToolChoice* out) {
  if (s == "none") {
    out->mode = ToolChoice::Mode::kNone;
  } else if (s == "auto") {
    out->mode = ToolChoice::Mode::kAuto;
  } else if (s == "required") {
    out->mode = ToolChoice::Mode::kRequired;
  } else {
    return false;
  }
  return true;
}

// What both APIs do once tools and tool_choice are read (vLLM's check_tool_usage).
Status settle_choice(bool choice_given, bool tools_given, ChatTools* out) {
  if (!choice_given) {
    out->choice.mode = out->has_tools() ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    return Status();
  }
  if (out->choice.mode == ToolChoice::Mode::kNone) return Status();
  if (!tools_given) return invalid_argument("When using `tool_choice`, `tools` must be set.");
  if (out->choice.mode == ToolChoice::Mode::kRequired && !out->has_tools()) {
    // OpenAI: "required" with an empty list behaves like "none".
    out->choice.mode = ToolChoice::Mode::kNone;
    out->tools = Json();
    return Status();
  }
  if (out->choice.mode == ToolChoice::Mode::kNamed && find_tool(out->tools, out->choice.name) == nullptr) {
    return invalid_argument("The tool specified in `tool_choice` does not match any of the specified `tools`");
  }
  return Status();
}

Status want_parallel(const Json& body, ChatTools* out) {
  const Json* p = given(body, "parallel_tool_calls");
  if (!p) return Status();
  if (!p->is_bool()) return invalid_argument("'parallel_tool_calls' must be a boolean");
  out->parallel_tool_calls = p->as_bool();
  return Status();
}

// A tool's parameters without its "$defs" (hoisted into `defs`, which must agree across tools).
StatusOr<Json> hoist_defs(const Json& params, Json* defs) {
  Json out = Json::object();
  for (const auto& [k, v] : params.as_object()) {
    if (k != "$defs") {
      out.set(k, v);
      continue;
    }
    if (!v.is_object()) return invalid_argument("a tool's parameters '$defs' must be an object");
    for (const auto& [name, schema] : v.as_object()) {
      if (const Json* have = defs->find(name)) {
        if (!(*have == schema)) {
          return invalid_argument("Tool definition '" + name + "' has multiple schemas, which is not supported.");
        }
        continue;
      }
      defs->set(name, schema);
    }
  }
  return out;
}

Json empty_object_schema() {
  Json s = Json::object();
  s.set("type", "object");
  s.set("properties", Json::object());
  return s;
}

// The chat shape every tool takes here: {"type": "function", "function": fn}.
Json function_tool(Json fn) {
  Json tool = Json::object();
  tool.set("type", "function");
  tool.set("function", std::move(fn));
  return tool;
}

// A /v1/chat/completions tool: {"type": "function", "function": {...}}; vLLM defaults a missing
// type to "function".
StatusOr<Json> chat_tool(const Json& tool, size_t i) {
  if (const Json* type = given(tool, "type")) {
    if (!type->is_string()) return invalid_argument("'" + at("tools", i) + ".type' must be a string");
    if (type->as_string() != "function") return unsupported_tool_type(type->as_string());
  }
  const Json* fn = tool.find("function");
  if (!fn || !fn->is_object()) return invalid_argument("'" + at("tools", i) + ".function' must be an object");
  KVASIR_RETURN_IF_ERROR(check_function(*fn, at("tools", i) + ".function"));
  return function_tool(*fn);
}

// A /v1/responses tool: the function's fields flat beside "type": "function".
StatusOr<Json> responses_tool(const Json& tool, size_t i) {
  const Json* type = tool.find("type");
  if (!type || !type->is_string()) return invalid_argument("'" + at("tools", i) + ".type' must be a string");
  if (type->as_string() != "function") return unsupported_tool_type(type->as_string());
  KVASIR_RETURN_IF_ERROR(check_function(tool, at("tools", i)));
  // The chat shape the templates know: the flat fields move under "function".
  Json fn = Json::object();
  for (const auto& [k, v] : tool.as_object()) {
    if (k != "type") fn.set(k, v);
  }
  return function_tool(std::move(fn));
}

// Reads body.tools into out->tools, each entry checked and put in chat shape by `to_chat_tool`.
// *tools_given: the field was there (an empty list counts).
Status read_tools(const Json& body, StatusOr<Json> (*to_chat_tool)(const Json& tool, size_t i), ChatTools* out,
                  bool* tools_given) {
  const Json* t = given(body, "tools");
  *tools_given = t != nullptr;
  if (!t) return Status();
  if (!t->is_array()) return invalid_argument("'tools' must be a list of tool objects");
  Json tools = Json::array();
  for (size_t i = 0; i < t->size(); ++i) {
    const Json& tool = t->as_array()[i];
    if (!tool.is_object()) return invalid_argument("'tools' must be a list of tool objects");
    KVASIR_ASSIGN_OR_RETURN(Json chat_shape, to_chat_tool(tool, i));
    tools.push_back(std::move(chat_shape));
  }
  out->tools = std::move(tools);
  return Status();
}

// Chat's tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
Status chat_tool_choice(const Json& tc, ToolChoice* out) {
  static const char* kUsage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
  if (tc.is_string()) {
    if (!mode_from_string(tc.as_string(), out)) {
      return invalid_argument("Invalid value for `tool_choice`: " + tc.as_string() +
                              "! Only named tools, \"none\", \"auto\" or \"required\" are supported.");
    }
    return Status();
  }
  if (!tc.is_object()) {
    return invalid_argument("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function object");
  }
  if (const Json* type = tc.find("type"); type && !(type->is_string() && type->as_string() == "function")) {
    return invalid_argument(std::string("'tool_choice.type' must be \"function\". ") + kUsage);
  }
  const Json* fn = tc.find("function");
  if (!fn || !fn->is_object()) return invalid_argument(std::string("Invalid value for `function` in `tool_choice`! ") + kUsage);
  const Json* name = fn->find("name");
  if (!name || !name->is_string() || name->as_string().empty()) {
    return invalid_argument(std::string("Expected a non-empty string `name` in `function` in `tool_choice`! ") + kUsage);
  }
  out->mode = ToolChoice::Mode::kNamed;
  out->name = name->as_string();
  return Status();
}

// The Responses API's tool_choice: "none" | "auto" | "required" | {"type": "function", "name"}.
Status responses_tool_choice(const Json& tc, ToolChoice* out) {
  if (tc.is_string()) {
    if (!mode_from_string(tc.as_string(), out)) {
      return invalid_argument("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    }
    return Status();
  }
  if (!tc.is_object()) return invalid_argument("'tool_choice' must be a string or an object");
  const Json* type = tc.find("type");
  if (!type || !type->is_string()) return invalid_argument("'tool_choice.type' must be a string");
  if (type->as_string() != "function") {
    return unimplemented("tool_choice type '" + type->as_string() + "' is not supported; use \"none\", \"auto\", \"required\" or a function");
  }
  const Json* name = tc.find("name");
  if (!name || !name->is_string() || name->as_string().empty()) {
    return invalid_argument("'tool_choice.name' must be a non-empty string");
  }
  out->mode = ToolChoice::Mode::kNamed;
  out->name = name->as_string();
  return Status();
}

}  // namespace

Status parse_chat_tools(const Json& body, ChatTools* out) {
  bool tools_given = false;
  KVASIR_RETURN_IF_ERROR(read_tools(body, chat_tool, out, &tools_given));
  KVASIR_RETURN_IF_ERROR(want_parallel(body, out));
  const Json* tc = given(body, "tool_choice");
  if (tc) KVASIR_RETURN_IF_ERROR(chat_tool_choice(*tc, &out->choice));
  return settle_choice(tc != nullptr, tools_given, out);
}

Status parse_responses_tools(const Json& body, ChatTools* out) {
  bool tools_given = false;
  KVASIR_RETURN_IF_ERROR(read_tools(body, responses_tool, out, &tools_given));
  KVASIR_RETURN_IF_ERROR(want_parallel(body, out));
  const Json* tc = given(body, "tool_choice");
  if (tc) KVASIR_RETURN_IF_ERROR(responses_tool_choice(*tc, &out->choice));
  // The Responses API's default is "auto" whether or not tools are given: without tools it asks
  // for nothing.
  const bool choice_given = tc && !(out->choice.mode == ToolChoice::Mode::kAuto && !out->has_tools());
  return settle_choice(choice_given, tools_given, out);
}

Status check_tool_choice_supported(const ChatTools& tools, bool auto_tools_enabled) {
  if (tools.choice.mode == ToolChoice::Mode::kAuto && tools.has_tools() && !auto_tools_enabled) {
    return invalid_argument("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  }
  return Status();
}

Json tools_for_template(const ChatTools& tools, bool exclude_tools_when_tool_choice_none) {
  if (!tools.has_tools()) return Json();
  if (tools.choice.mode == ToolChoice::Mode::kNone && exclude_tools_when_tool_choice_none) return Json();
  return tools.tools;
}

StatusOr<std::optional<StructuredOutputSpec>> tool_choice_structured_output(const ChatTools& tools) {
  if (!tools.has_tools()) return std::optional<StructuredOutputSpec>();
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  if (tools.choice.mode == ToolChoice::Mode::kNamed) {
    const Json* fn = find_tool(tools.tools, tools.choice.name);
    if (!fn) return invalid_argument("Tool '" + tools.choice.name + "' has not been passed in `tools`.");
    const Json* p = fn->find("parameters");
    spec.text = (p && p->is_object() && p->size() > 0) ? p->dump() : empty_object_schema().dump();
    return std::optional<StructuredOutputSpec>(std::move(spec));
  }
  if (tools.choice.mode != ToolChoice::Mode::kRequired) return std::optional<StructuredOutputSpec>();
  Json defs = Json::object();
  Json any_of = Json::array();
  for (const Json& t : tools.tools.as_array()) {
    const Json& fn = *t.find("function");
    Json name_schema = Json::object();
    name_schema.set("type", "string");
    Json names = Json::array();
    names.push_back(fn.get_string("name"));
    name_schema.set("enum", std::move(names));
    Json params = empty_object_schema();
    if (const Json* p = fn.find("parameters"); p && p->is_object() && p->size() > 0) {
      KVASIR_ASSIGN_OR_RETURN(params, hoist_defs(*p, &defs));
    }
    Json props = Json::object();
    props.set("name", std::move(name_schema));
    props.set("parameters", std::move(params));
    Json one = Json::object();
    one.set("type", "object");
    one.set("properties", std::move(props));
    Json required = Json::array();
    required.push_back("name");
    required.push_back("parameters");
    one.set("required", std::move(required));
    any_of.push_back(std::move(one));
  }
  // "type" inside each branch, not beside anyOf: XGrammar reads only anyOf where both appear (the
  // grammar compiler refuses such a schema rather than drop the type).
  Json items = Json::object();
  items.set("anyOf", std::move(any_of));
  Json schema = Json::object();
  schema.set("type", "array");
  schema.set("minItems", 1);
  if (!tools.parallel_tool_calls) schema.set("maxItems", 1);
  schema.set("items", std::move(items));
  if (defs.size() > 0) schema.set("$defs", std::move(defs));
  spec.text = schema.dump();
  return std::optional<StructuredOutputSpec>(std::move(spec));
}

Json tool_choice_json(const ToolChoice& choice, bool responses_shape) {
  switch (choice.mode) {
    case ToolChoice::Mode::kNone: return Json("none");
    case ToolChoice::Mode::kAuto: return Json("auto");
    case ToolChoice::Mode::kRequired: return Json("required");
    case ToolChoice::Mode::kNamed: break;
  }
  Json o = Json::object();
  o.set("type", "function");
  if (responses_shape) {
    o.set("name", choice.name);
  } else {
    Json fn = Json::object();
    fn.set("name", choice.name);
    o.set("function", std::move(fn));
  }
  return o;
}

}  // namespace kvasir::server
