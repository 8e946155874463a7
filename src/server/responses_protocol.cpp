#include "server/responses_protocol.h"

#include <set>

#include "server/openai_response.h"
#include "server/sampling_json.h"

namespace kvasir::server {
namespace {

// Fields /v1/responses implements (OpenAI's and vLLM's extensions). Anything else is a 400
// naming it: a client must not believe a feature took effect when it did not.
const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {
      "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
      "max_output_tokens", "temperature", "top_p", "stream", "stream_options", "store",
      "previous_response_id", "metadata", "user", "safety_identifier", "prompt_cache_key",
      "prompt_cache_retention", "service_tier", "truncation", "include", "top_logprobs", "reasoning",
      "background", "max_tool_calls", "conversation", "prompt", "context_management",
      // vLLM's extra sampling and scheduling fields
      "top_k", "min_p", "seed", "stop", "repetition_penalty", "presence_penalty", "frequency_penalty",
      "ignore_eos", "skip_special_tokens", "include_stop_str_in_output", "logit_bias", "min_tokens",
      "priority", "cache_salt"};
  return k;
}

// Sampling fields read by the shared adapter (names as in chat/completions).
const char* const kSamplingFields[] = {"temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                       "repetition_penalty", "presence_penalty", "frequency_penalty",
                                       "ignore_eos", "skip_special_tokens", "include_stop_str_in_output",
                                       "logit_bias", "min_tokens"};

bool present(const Json& body, const char* key) {
  const Json* v = body.find(key);
  return v && !v->is_null();
}

Status want_bool(const Json& body, const char* key, bool* out) {
  const Json* v = body.find(key);
  if (!v || v->is_null()) return Status();
  if (!v->is_bool()) return invalid_argument(std::string("'") + key + "' must be a boolean");
  *out = v->as_bool();
  return Status();
}

Status want_string(const Json& body, const char* key, std::string* out) {
  const Json* v = body.find(key);
  if (!v || v->is_null()) return Status();
  if (!v->is_string()) return invalid_argument(std::string("'") + key + "' must be a string");
  *out = v->as_string();
  return Status();
}

Status not_supported(const std::string& field, const std::string& why) {
  return unimplemented("'" + field + "' is not supported by this server" + (why.empty() ? "" : ": " + why));
}

// The text of a message's content: a string, or text parts joined with "\n" (as chat does).
Status content_text(const Json& content, const std::string& where, std::string* out) {
  if (content.is_null()) return Status();
  if (content.is_string()) {
    *out = content.as_string();
    return Status();
  }
  if (!content.is_array()) return invalid_argument("'" + where + ".content' must be a string or a list of content parts");
  bool first = true;
  for (const Json& part : content.as_array()) {
    const Json* type = part.is_object() ? part.find("type") : nullptr;
    if (!type || !type->is_string()) return invalid_argument("each content part of '" + where + "' needs a string 'type'");
    const std::string& t = type->as_string();
    const char* key = nullptr;
    if (t == "input_text" || t == "output_text" || t == "text" || t == "reasoning_text" || t == "summary_text") {
      key = "text";
    } else if (t == "refusal") {
      key = "refusal";
    } else {
      return unimplemented("content part type '" + t + "' is not supported (text only)");
    }
    const Json* text = part.find(key);
    if (!text || !text->is_string()) return invalid_argument("a '" + t + "' content part needs a string '" + key + "'");
    if (!first) *out += '\n';
    *out += text->as_string();
    first = false;
  }
  return Status();
}

Json* last_assistant(Json* messages) {
  if (messages->size() == 0) return nullptr;
  Json& m = messages->as_array().back();
  return m.get_string("role") == "assistant" ? &m : nullptr;
}

Status parse_text_config(const Json& text, ResponsesRequest* out) {
  if (!text.is_object()) return invalid_argument("'text' must be an object");
  for (const auto& [k, v] : text.as_object()) {
    if (v.is_null()) continue;
    if (k == "format") {
      KVASIR_ASSIGN_OR_RETURN(out->text_format, structured_output_from_text_format(v));
    } else if (k == "verbosity") {
      if (!v.is_string() || v.as_string() != "medium") return not_supported("text.verbosity", "only \"medium\"");
    } else {
      return not_supported("text." + k, "");
    }
  }
  Json echo = Json::object();
  const Json* f = text.find("format");
  if (f && !f->is_null()) {
    echo.set("format", *f);
  } else {
    Json plain = Json::object();
    plain.set("type", "text");
    echo.set("format", std::move(plain));
  }
  out->echo.set("text", std::move(echo));
  return Status();
}

Status parse_reasoning(const Json& r, ResponsesRequest* out) {
  if (!r.is_object()) return invalid_argument("'reasoning' must be an object");
  for (const auto& [k, v] : r.as_object()) {
    if (v.is_null()) continue;
    if (k == "effort") {
      if (!v.is_string()) return invalid_argument("'reasoning.effort' must be a string");
      // vLLM hands it to the chat template, which may or may not use it.
      if (!out->chat_template_kwargs.is_object()) out->chat_template_kwargs = Json::object();
      out->chat_template_kwargs.set("reasoning_effort", v);
    } else {
      return not_supported("reasoning." + k, "reasoning summaries are not generated");
    }
  }
  out->echo.set("reasoning", r);
  return Status();
}

}  // namespace

StatusOr<std::optional<StructuredOutputSpec>> structured_output_from_text_format(const Json& format) {
  if (format.is_null()) return std::optional<StructuredOutputSpec>();
  const Json* type = format.is_object() ? format.find("type") : nullptr;
  if (!type || !type->is_string()) return invalid_argument("'text.format' must be an object with a string 'type'");
  const std::string& t = type->as_string();
  if (t == "text") return std::optional<StructuredOutputSpec>();
  StructuredOutputSpec spec;
  if (t == "json_object") {
    spec.kind = StructuredOutputSpec::Kind::kJsonObject;
    return std::optional<StructuredOutputSpec>(std::move(spec));
  }
  if (t != "json_schema") return not_supported("text.format.type '" + t + "'", "use text, json_object or json_schema");
  const Json* schema = format.find("schema");
  if (!schema || !schema->is_object()) return invalid_argument("'text.format.schema' must be an object (a JSON schema)");
  if (const Json* n = format.find("name"); n && !n->is_null() && !n->is_string()) {
    return invalid_argument("'text.format.name' must be a string");
  }
  if (const Json* s = format.find("strict"); s && !s->is_null() && !s->is_bool()) {
    return invalid_argument("'text.format.strict' must be a boolean");
  }
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.text = schema->dump();
  return std::optional<StructuredOutputSpec>(std::move(spec));
}

Status responses_items_to_messages(const Json& items, bool skip_reasoning, Json* messages) {
  if (!messages->is_array()) *messages = Json::array();
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& item = items.as_array()[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return invalid_argument("'" + where + "' must be an object");
    std::string type = item.contains("role") ? "message" : "";
    KVASIR_RETURN_IF_ERROR(want_string(item, "type", &type));
    if (type == "message") {
      std::string role;
      KVASIR_RETURN_IF_ERROR(want_string(item, "role", &role));
      if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
        return invalid_argument("'" + where + ".role' must be user, system, developer or assistant");
      }
      if (role == "developer") role = "system";  // chat templates know no developer role
      std::string text;
      const Json* content = item.find("content");
      KVASIR_RETURN_IF_ERROR(content_text(content ? *content : Json(), where, &text));
      Json* prev = role == "assistant" ? last_assistant(messages) : nullptr;
      if (prev && !prev->contains("content")) {
        prev->set("content", std::move(text));  // the text of a turn that began with a call
        continue;
      }
      Json m = Json::object();
      m.set("role", role);
      m.set("content", std::move(text));
      messages->push_back(std::move(m));
    } else if (type == "function_call") {
      std::string call_id, name, arguments;
      KVASIR_RETURN_IF_ERROR(want_string(item, "call_id", &call_id));
      KVASIR_RETURN_IF_ERROR(want_string(item, "name", &name));
      KVASIR_RETURN_IF_ERROR(want_string(item, "arguments", &arguments));
      if (call_id.empty() || name.empty()) {
        return invalid_argument("'" + where + "' (function_call) needs a 'call_id' and a 'name'");
      }
      Json fn = Json::object();
      fn.set("name", name);
      fn.set("arguments", arguments);
      Json call = Json::object();
      call.set("id", call_id);
      call.set("type", "function");
      call.set("function", std::move(fn));
      Json* prev = last_assistant(messages);
      if (prev) {
        Json* calls = prev->find("tool_calls");
        if (!calls || !calls->is_array()) {
          prev->set("tool_calls", Json::array());
          calls = prev->find("tool_calls");
        }
        calls->push_back(std::move(call));
        continue;
      }
      Json m = Json::object();
      m.set("role", "assistant");
      Json calls = Json::array();
      calls.push_back(std::move(call));
      m.set("tool_calls", std::move(calls));
      messages->push_back(std::move(m));
    } else if (type == "function_call_output") {
      std::string call_id, output;
      KVASIR_RETURN_IF_ERROR(want_string(item, "call_id", &call_id));
      if (call_id.empty()) return invalid_argument("'" + where + "' (function_call_output) needs a 'call_id'");
      const Json* o = item.find("output");
      if (!o || (!o->is_string() && !o->is_array())) {
        return invalid_argument("'" + where + ".output' must be a string or a list of content parts");
      }
      KVASIR_RETURN_IF_ERROR(content_text(*o, where, &output));
      Json m = Json::object();
      m.set("role", "tool");
      m.set("content", std::move(output));
      m.set("tool_call_id", call_id);
      messages->push_back(std::move(m));
    } else if (type == "reasoning") {
      if (present(item, "encrypted_content")) return not_supported(where + ".encrypted_content", "");
      std::string text;
      const Json* content = item.find("content");
      const Json* summary = item.find("summary");
      if (content && content->is_array() && content->size() > 0) {
        KVASIR_RETURN_IF_ERROR(content_text(*content, where, &text));
      } else if (summary && summary->is_array() && summary->size() > 0) {
        KVASIR_RETURN_IF_ERROR(content_text(*summary, where, &text));
      }
      if (skip_reasoning) continue;
      Json* prev = last_assistant(messages);
      if (prev && !prev->contains("reasoning")) {
        prev->set("reasoning", std::move(text));
        continue;
      }
      Json m = Json::object();
      m.set("role", "assistant");
      m.set("reasoning", std::move(text));
      messages->push_back(std::move(m));
    } else if (type.empty()) {
      return invalid_argument("'" + where + "' needs a 'type' (or a 'role' for a message)");
    } else {
      return unimplemented("input item type '" + type + "' is not supported");
    }
  }
  return Status();
}

Status parse_responses_request(const Json& body, const SamplingParams& defaults, ResponsesRequest* out) {
  if (!body.is_object()) return invalid_argument("request body must be a JSON object");
  for (const auto& [k, v] : body.as_object()) {
    if (!known_fields().count(k)) return not_supported(k, "");
  }
  for (const char* k : {"conversation", "prompt", "context_management"}) {
    if (present(body, k)) return not_supported(k, "");
  }
  bool background = false;
  KVASIR_RETURN_IF_ERROR(want_bool(body, "background", &background));
  if (background) return not_supported("background", "responses are generated while the request waits");
  KVASIR_RETURN_IF_ERROR(want_string(body, "model", &out->model));

  // Sampling: the shared adapter on the fields the Responses API has.
  out->params = defaults;
  Json sampling = Json::object();
  for (const char* k : kSamplingFields) {
    if (const Json* v = body.find(k)) sampling.set(k, *v);
  }
  if (const Json* m = body.find("max_output_tokens"); m && !m->is_null()) {
    if (!m->is_int() || m->as_int() < 1) return invalid_argument("'max_output_tokens' must be a positive integer");
    sampling.set("max_tokens", *m);
    out->max_tokens_set = true;
  }
  KVASIR_RETURN_IF_ERROR(apply_sampling_json(sampling, &out->params));
  out->params.n = 1;

  const Json* input = body.find("input");
  if (!input || input->is_null()) return invalid_argument("'input' is required");
  out->input = Json::array();
  if (input->is_string()) {
    Json m = Json::object();
    m.set("role", "user");
    m.set("content", *input);
    out->input.push_back(std::move(m));
  } else if (input->is_array()) {
    KVASIR_RETURN_IF_ERROR(responses_items_to_messages(*input, /*skip_reasoning=*/false, &out->input));
  } else {
    return invalid_argument("'input' must be a string or a list of input items");
  }
  if (const Json* ins = body.find("instructions"); ins && !ins->is_null()) {
    if (!ins->is_string()) return invalid_argument("'instructions' must be a string");
    out->instructions = ins->as_string();
  }
  KVASIR_RETURN_IF_ERROR(parse_responses_tools(body, &out->tools));

  KVASIR_RETURN_IF_ERROR(want_bool(body, "stream", &out->stream));
  if (const Json* so = body.find("stream_options"); so && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    if (!out->stream) return invalid_argument("'stream_options' can only be set when 'stream' is true");
    bool obfuscation = false;  // never added: accepted either way, it only pads events
    KVASIR_RETURN_IF_ERROR(want_bool(*so, "include_obfuscation", &obfuscation));
  }
  KVASIR_RETURN_IF_ERROR(want_bool(body, "store", &out->store));
  KVASIR_RETURN_IF_ERROR(want_string(body, "previous_response_id", &out->previous_response_id));
  std::string tier = "auto", truncation = "disabled";
  KVASIR_RETURN_IF_ERROR(want_string(body, "service_tier", &tier));
  if (tier != "auto" && tier != "default") return not_supported("service_tier", "only \"auto\" or \"default\"");
  KVASIR_RETURN_IF_ERROR(want_string(body, "truncation", &truncation));
  if (truncation != "disabled") return not_supported("truncation", "only \"disabled\" (a prompt too long is a 400)");
  if (const Json* inc = body.find("include"); inc && !inc->is_null()) {
    if (!inc->is_array()) return invalid_argument("'include' must be a list of strings");
    if (inc->size() > 0) return not_supported("include", "no extra output data is available");
  }
  if (const Json* tl = body.find("top_logprobs"); tl && !tl->is_null()) {
    if (!tl->is_int()) return invalid_argument("'top_logprobs' must be an integer");
    if (tl->as_int() != 0) return not_supported("top_logprobs", "logprobs are not returned by /v1/responses");
  }
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"}) {
    std::string ignored;
    KVASIR_RETURN_IF_ERROR(want_string(body, k, &ignored));
  }
  if (const Json* mtc = body.find("max_tool_calls"); mtc && !mtc->is_null() && !mtc->is_int()) {
    return invalid_argument("'max_tool_calls' must be an integer");  // bounds built-in tools: there are none
  }
  KVASIR_RETURN_IF_ERROR(parse_scheduling_fields(body, out));

  // What the response object repeats, in OpenAI's order.
  Json& e = out->echo;
  e.set("background", false);
  e.set("instructions", out->instructions ? Json(*out->instructions) : Json());
  e.set("max_output_tokens", present(body, "max_output_tokens") ? *body.find("max_output_tokens") : Json());
  e.set("max_tool_calls", present(body, "max_tool_calls") ? *body.find("max_tool_calls") : Json());
  e.set("parallel_tool_calls", out->tools.parallel_tool_calls);
  e.set("previous_response_id", out->previous_response_id.empty() ? Json() : Json(out->previous_response_id));
  e.set("reasoning", Json());
  if (const Json* r = body.find("reasoning"); r && !r->is_null()) KVASIR_RETURN_IF_ERROR(parse_reasoning(*r, out));
  e.set("service_tier", tier);
  e.set("store", out->store);
  e.set("temperature", static_cast<double>(out->params.temperature));
  {
    Json plain = Json::object();
    Json fmt = Json::object();
    fmt.set("type", "text");
    plain.set("format", std::move(fmt));
    e.set("text", std::move(plain));
  }
  if (const Json* t = body.find("text"); t && !t->is_null()) KVASIR_RETURN_IF_ERROR(parse_text_config(*t, out));
  const Json* tc = body.find("tool_choice");
  e.set("tool_choice", tc && !tc->is_null() ? *tc : Json("auto"));
  // The tools as OpenAI echoes them: parameters and strict always present (null when not given).
  Json tools = Json::array();
  if (const Json* t = body.find("tools"); t && t->is_array()) {
    for (const Json& tool : t->as_array()) {
      Json echoed = tool;
      for (const char* k : {"parameters", "strict"}) {
        if (!echoed.contains(k)) echoed.set(k, Json());
      }
      tools.push_back(std::move(echoed));
    }
  }
  e.set("tools", std::move(tools));
  e.set("top_logprobs", 0);
  e.set("top_p", static_cast<double>(out->params.top_p));
  e.set("truncation", truncation);
  if (present(body, "user")) e.set("user", *body.find("user"));  // the spec has no null user
  if (const Json* md = body.find("metadata"); md && !md->is_null()) {
    if (!md->is_object()) return invalid_argument("'metadata' must be an object of strings");
    for (const auto& [k, v] : md->as_object()) {
      if (!v.is_string()) return invalid_argument("'metadata' values must be strings");
    }
    e.set("metadata", *md);
  } else {
    e.set("metadata", Json::object());
  }
  return Status();
}

Json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  Json part = Json::object();
  part.set("type", "reasoning_text");
  part.set("text", text);
  Json content = Json::array();
  content.push_back(std::move(part));
  Json o = Json::object();
  o.set("id", id);
  o.set("type", "reasoning");
  o.set("summary", Json::array());
  o.set("content", std::move(content));
  o.set("encrypted_content", Json());
  o.set("status", status);
  return o;
}

Json output_text_part(const std::string& text) {
  Json p = Json::object();
  p.set("type", "output_text");
  p.set("text", text);
  p.set("annotations", Json::array());
  p.set("logprobs", Json::array());
  return p;
}

Json message_item(const std::string& id, const std::string& text, const char* status) {
  Json content = Json::array();
  content.push_back(output_text_part(text));
  Json o = Json::object();
  o.set("id", id);
  o.set("type", "message");
  o.set("status", status);
  o.set("role", "assistant");
  o.set("content", std::move(content));
  return o;
}

Json function_call_item(const std::string& id, const ToolCall& call, const char* status) {
  Json o = Json::object();
  o.set("id", id);
  o.set("type", "function_call");
  o.set("status", status);
  o.set("call_id", call.id);
  o.set("name", call.name);
  o.set("arguments", call.arguments);
  return o;
}

Json output_items(const ParsedOutput& out) {
  Json items = Json::array();
  if (out.reasoning && !out.reasoning->empty()) {
    items.push_back(reasoning_item(make_request_id("rs_"), *out.reasoning, "completed"));
  }
  const std::string text = out.content.value_or("");
  // vLLM: a message only when there is text, except that an output of nothing at all is an
  // empty message (clients look for one).
  if (!text.empty() || items.size() + out.tool_calls.size() == 0) {
    items.push_back(message_item(make_request_id("msg_"), text, "completed"));
  }
  for (const ToolCall& c : out.tool_calls) items.push_back(function_call_item(make_request_id("fc_"), c, "completed"));
  return items;
}

Json response_usage_json(const ResponseUsage& u) {
  Json in = Json::object();
  in.set("cached_tokens", u.cached_tokens);
  in.set("cache_write_tokens", 0);  // the spec requires it; the prefix cache has no billed writes
  Json outd = Json::object();
  outd.set("reasoning_tokens", u.reasoning_tokens);
  Json o = Json::object();
  o.set("input_tokens", u.input_tokens);
  o.set("input_tokens_details", std::move(in));
  o.set("output_tokens", u.output_tokens);
  o.set("output_tokens_details", std::move(outd));
  o.set("total_tokens", u.input_tokens + u.output_tokens);
  return o;
}

Json response_object(const ResponseState& s, const Json& echo) {
  Json o = Json::object();
  o.set("id", s.id);
  o.set("object", "response");
  o.set("created_at", s.created_at);
  o.set("status", s.status);
  o.set("completed_at", s.status == "completed" ? Json(unix_time_s()) : Json());
  o.set("error", s.error);
  if (s.status == "incomplete") {
    Json d = Json::object();
    d.set("reason", "max_output_tokens");
    o.set("incomplete_details", std::move(d));
  } else {
    o.set("incomplete_details", Json());
  }
  o.set("model", s.model);
  o.set("output", s.output);
  for (const auto& [k, v] : echo.as_object()) o.set(k, v);
  if (!s.usage.is_null()) o.set("usage", s.usage);  // the spec has no null usage (in progress: absent)
  return o;
}

ApiError response_not_found_error(const std::string& id, const char* param) {
  const bool previous = std::string(param) == "previous_response_id";
  return {404, std::string(previous ? "Previous response" : "Response") + " with id '" + id + "' not found.",
          "invalid_request_error", param, previous ? "previous_response_not_found" : "not_found"};
}

}  // namespace kvasir::server
