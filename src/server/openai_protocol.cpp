#include "server/openai_protocol.h"

#include <cctype>
#include <limits>

#include "server/sampling_json.h"
#include "server/structured_outputs_json.h"
#include "server/openai_response.h"

namespace kvasir::server {
namespace {

// A field named at the start of a message: "'top_p' must ..." or "top_p must ...".
std::string guess_param(const std::string& m) {
  if (m.size() > 2 && m[0] == '\'') {
    size_t end = m.find('\'', 1);
    if (end != std::string::npos && end > 1) return m.substr(1, end - 1);
  }
  size_t i = 0;
  while (i < m.size() && (std::islower(static_cast<unsigned char>(m[i])) || m[i] == '_')) ++i;
  if (i > 0 && m.compare(i, 6, " must ") == 0) return m.substr(0, i);
  return "";
}

Status want_bool(const Json& body, const char* key, bool* out) {
  const Json* v = body.find(key);
  if (!v || v->is_null()) return Status();
  if (!v->is_bool()) return invalid_argument(std::string("'") + key + "' must be a boolean");
  *out = v->as_bool();
  return Status();
}

bool present(const Json& body, const char* key) {
  const Json* v = body.find(key);
  return v && !v->is_null();
}

Status parse_common(const Json& body, const SamplingParams& defaults, bool chat, GenerationRequestBase* out) {
  if (!body.is_object()) return invalid_argument("request body must be a JSON object");
  if (const Json* m = body.find("model"); m && !m->is_null()) {
    if (!m->is_string()) return invalid_argument("'model' must be a string");
    out->model = m->as_string();
  }
  out->params = defaults;
  KVASIR_RETURN_IF_ERROR(apply_sampling_json(body, &out->params, chat));
  out->max_tokens_set = present(body, "max_tokens") || present(body, "max_completion_tokens");
  KVASIR_RETURN_IF_ERROR(want_bool(body, "stream", &out->stream));
  if (const Json* so = body.find("stream_options"); so && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    if (!out->stream) return invalid_argument("Stream options can only be defined when `stream=True`.");
    KVASIR_RETURN_IF_ERROR(want_bool(*so, "include_usage", &out->include_usage));
    KVASIR_RETURN_IF_ERROR(want_bool(*so, "continuous_usage_stats", &out->continuous_usage_stats));
  }
  KVASIR_RETURN_IF_ERROR(parse_scheduling_fields(body, out));
  if (const Json* b = body.find("best_of"); b && !b->is_null()) {
    if (!b->is_int()) return invalid_argument("'best_of' must be an integer");
    if (b->as_int() != out->params.n) return unimplemented("best_of != n is not supported");
  }
  bool beam = false;
  KVASIR_RETURN_IF_ERROR(want_bool(body, "use_beam_search", &beam));
  if (beam) return unimplemented("beam search is not supported");
  return apply_structured_outputs_json(body, &out->params);
}

}  // namespace

Status parse_scheduling_fields(const Json& body, GenerationRequestBase* out) {
  if (const Json* pr = body.find("priority"); pr && !pr->is_null()) {
    if (!pr->is_int() || pr->as_int() < -(1 << 30) || pr->as_int() > (1 << 30)) {
      return invalid_argument("'priority' must be an integer in [-2^30, 2^30]");
    }
    out->priority = static_cast<int>(pr->as_int());
  }
  if (const Json* salt = body.find("cache_salt"); salt && !salt->is_null()) {
    if (!salt->is_string() || salt->as_string().empty()) return invalid_argument("'cache_salt' must be a non-empty string");
    out->cache_salt = salt->as_string();
  }
  return Status();
}

namespace {

Status parse_int_token(const Json& t, const char* field, int32_t* out) {
  if (!t.is_int()) return invalid_argument(std::string("'") + field + "' must contain only integer token ids");
  const int64_t v = t.as_int();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("Token id " + std::to_string(v) + " is out of vocabulary");
  }
  *out = static_cast<int32_t>(v);
  return Status();
}

Status parse_prompt(const Json* p, std::vector<PromptSpec>* out) {
  static const char* kShape = "'prompt' must be a string, a list of strings, a list of token ids, or a list of token-id lists";
  if (!p || p->is_null()) return invalid_argument("'prompt' is required");
  if (p->is_string()) {
    out->push_back(PromptSpec{p->as_string(), {}, false});
    return Status();
  }
  if (!p->is_array()) return invalid_argument(kShape);
  const Json::Array& a = p->as_array();
  if (a.empty()) return invalid_argument("'prompt' must not be empty");
  if (a.size() > kMaxPromptsPerRequest && !a[0].is_int()) {
    return invalid_argument("'prompt' holds more than " + std::to_string(kMaxPromptsPerRequest) + " prompts");
  }
  if (a[0].is_int()) {
    PromptSpec s;
    s.is_tokens = true;
    for (const Json& t : a) {
      int32_t id = 0;
      KVASIR_RETURN_IF_ERROR(parse_int_token(t, "prompt", &id));
      s.token_ids.push_back(id);
    }
    out->push_back(std::move(s));
    return Status();
  }
  for (const Json& e : a) {
    if (e.is_string()) {
      out->push_back(PromptSpec{e.as_string(), {}, false});
    } else if (e.is_array()) {
      if (e.size() == 0) return invalid_argument("'prompt' must not contain an empty token list");
      PromptSpec s;
      s.is_tokens = true;
      for (const Json& t : e.as_array()) {
        int32_t id = 0;
        KVASIR_RETURN_IF_ERROR(parse_int_token(t, "prompt", &id));
        s.token_ids.push_back(id);
      }
      out->push_back(std::move(s));
    } else {
      return invalid_argument(kShape);
    }
  }
  return Status();
}

// vLLM (and transformers' tool-use templates) want an assistant's tool call arguments as an
// object, while OpenAI clients send the JSON text: parse it; missing or empty becomes {}.
StatusOr<Json> tool_calls_for_template(const Json& calls) {
  Json out = Json::array();
  for (const Json& call : calls.as_array()) {
    const Json* fn = call.is_object() ? call.find("function") : nullptr;
    if (!fn || !fn->is_object()) {
      return invalid_argument("each entry of an assistant message's 'tool_calls' needs a 'function' object");
    }
    const Json* args = fn->find("arguments");
    if (args && !args->is_null() && !args->is_string() && !args->is_object()) {
      return invalid_argument("a tool call's 'function.arguments' must be a JSON string");
    }
    Json parsed = Json::object();
    if (args && args->is_object()) {
      parsed = *args;
    } else if (args && args->is_string() && !args->as_string().empty()) {
      auto j = parse_json(args->as_string());
      if (!j.ok()) {
        return invalid_argument("a tool call's 'function.arguments' is not valid JSON: " + j.status().message());
      }
      parsed = std::move(*j);
    }
    Json f = *fn;
    f.set("arguments", std::move(parsed));
    Json c = call;
    c.set("function", std::move(f));
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

ApiError api_error_from_status(const Status& s) {
  ApiError e;
  e.message = s.message();
  e.param = guess_param(s.message());
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.status = 400;
      break;
    case StatusCode::kUnimplemented:
      e.status = 400;
      e.code = "unsupported";
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      e.code = "not_found";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      e.code = "service_unavailable";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

std::string capped_error_message(std::string_view message) {
  if (message.size() <= kMaxErrorMessageBytes) return std::string(message);
  size_t cut = kMaxErrorMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return std::string(message.substr(0, cut)) + "... [error message truncated; " + std::to_string(message.size()) +
         " bytes in all]";
}

Json error_body(const ApiError& e) {
  Json err = Json::object();
  err.set("message", capped_error_message(e.message));
  err.set("type", e.type);
  err.set("param", e.param.empty() ? Json() : Json(e.param));
  err.set("code", e.code.empty() ? Json() : Json(e.code));
  Json body = Json::object();
  body.set("error", std::move(err));
  return body;
}

http::Response json_response(int status, const Json& body) {
  http::Response r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = dump_json_utf8(body);
  return r;
}

http::Response error_response(const ApiError& e) { return json_response(e.status, error_body(e)); }

StatusOr<Json> parse_json_object_body(const std::string& body) {
  JsonParseLimits limits;
  limits.max_depth = 64;
  limits.max_elements = 4u << 20;
  auto j = parse_json(body, limits);
  if (!j.ok()) return invalid_argument("Malformed JSON body: " + j.status().message());
  if (!j->is_object()) return invalid_argument("request body must be a JSON object");
  return j;
}

Status parse_token_list(const Json& v, const char* field, std::vector<int32_t>* out) {
  if (!v.is_array()) return invalid_argument(std::string("'") + field + "' must be a list of token ids");
  for (const Json& t : v.as_array()) {
    int32_t id = 0;
    KVASIR_RETURN_IF_ERROR(parse_int_token(t, field, &id));
    out->push_back(id);
  }
  return Status();
}

Status parse_completion_request(const Json& body, const SamplingParams& defaults, CompletionRequest* out) {
  bool echo = false;
  KVASIR_RETURN_IF_ERROR(want_bool(body, "echo", &echo));
  const Json* mt = body.find("max_tokens");
  if (echo && mt && mt->is_int() && mt->as_int() == 0) {
    // vLLM's scoring path: run the prompt, answer with it and its logprobs, generate nothing.
    Json one = body;
    one.set("max_tokens", 1);
    KVASIR_RETURN_IF_ERROR(parse_common(one, defaults, /*chat=*/false, out));
    out->score_prompt_only = true;
    if (out->params.structured_outputs) return invalid_argument("max_tokens 0 generates nothing to constrain: drop the structured output fields");
  } else {
    KVASIR_RETURN_IF_ERROR(parse_common(body, defaults, /*chat=*/false, out));
  }
  if (present(body, "suffix")) return invalid_argument("suffix is not currently supported");
  if (present(body, "prompt_embeds")) return unimplemented("prompt_embeds is not supported");
  KVASIR_RETURN_IF_ERROR(parse_prompt(body.find("prompt"), &out->prompts));
  KVASIR_RETURN_IF_ERROR(want_bool(body, "echo", &out->echo));
  KVASIR_RETURN_IF_ERROR(want_bool(body, "add_special_tokens", &out->add_special_tokens));
  out->prompt_logprobs_asked = out->params.prompt_logprobs.has_value();
  if (out->echo && out->params.logprobs && !out->params.prompt_logprobs) {
    out->params.prompt_logprobs = out->params.logprobs;  // echo shows the prompt's logprobs too
  }
  return Status();
}

StatusOr<Json> normalize_chat_messages_for_template(const Json& messages) {
  if (!messages.is_array()) return invalid_argument("'messages' must be a list of message objects");
  if (messages.size() == 0) return invalid_argument("'messages' must contain at least one message");
  Json out = Json::array();
  for (const Json& m : messages.as_array()) {
    if (!m.is_object()) return invalid_argument("each entry of 'messages' must be an object");
    const Json* role = m.find("role");
    if (!role || !role->is_string()) return invalid_argument("each message needs a string 'role'");
    Json msg = Json::object();
    for (const auto& [key, value] : m.as_object()) {
      if (key == "tool_calls" && role->as_string() == "assistant" && value.is_array()) {
        KVASIR_ASSIGN_OR_RETURN(Json calls, tool_calls_for_template(value));
        msg.set(key, std::move(calls));
        continue;
      }
      if (key != "content" || value.is_string()) {
        msg.set(key, value);
        continue;
      }
      if (value.is_null()) {
        // vLLM renders a missing assistant content (tool calls only) as "" in string format.
        msg.set(key, Json(""));
        continue;
      }
      if (!value.is_array()) return invalid_argument("'content' must be a string or a list of content parts");
      std::string text;
      bool first = true;
      for (const Json& part : value.as_array()) {
        const std::string* piece = nullptr;
        if (part.is_string()) {
          piece = &part.as_string();
        } else if (part.is_object()) {
          const Json* type = part.find("type");
          if (!type || !type->is_string()) return invalid_argument("each content part needs a string 'type'");
          if (type->as_string() != "text" && type->as_string() != "input_text") {
            return invalid_argument("content part type '" + type->as_string() + "' is not supported (text only)");
          }
          const Json* t = part.find("text");
          if (!t || !t->is_string()) return invalid_argument("a text content part needs a string 'text'");
          piece = &t->as_string();
        } else {
          return invalid_argument("each content part must be an object");
        }
        if (!first) text += '\n';
        text += *piece;
        first = false;
      }
      msg.set(key, Json(std::move(text)));
    }
    // vLLM renders a message without content (an assistant turn of tool calls) with content "".
    if (!msg.contains("content")) msg.set("content", Json(""));
    out.push_back(std::move(msg));
  }
  return out;
}

Status parse_chat_request(const Json& body, const SamplingParams& defaults, ChatRequest* out) {
  KVASIR_RETURN_IF_ERROR(parse_common(body, defaults, /*chat=*/true, out));
  // Chat answers do not carry prompt logprobs yet: refused rather than computed and dropped.
  if (present(body, "prompt_logprobs")) {
    return unimplemented("'prompt_logprobs' is not supported on chat completions (use /v1/completions)");
  }
  const Json* msgs = body.find("messages");
  if (!msgs || msgs->is_null()) return invalid_argument("'messages' is required");
  KVASIR_ASSIGN_OR_RETURN(out->messages, normalize_chat_messages_for_template(*msgs));
  KVASIR_RETURN_IF_ERROR(parse_chat_tools(body, &out->tools));
  KVASIR_RETURN_IF_ERROR(want_bool(body, "add_generation_prompt", &out->add_generation_prompt));
  KVASIR_RETURN_IF_ERROR(want_bool(body, "continue_final_message", &out->continue_final_message));
  if (out->continue_final_message && out->add_generation_prompt) {
    return invalid_argument("Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  KVASIR_RETURN_IF_ERROR(want_bool(body, "add_special_tokens", &out->add_special_tokens));
  KVASIR_RETURN_IF_ERROR(want_bool(body, "logprobs", &out->logprobs));
  if (const Json* ct = body.find("chat_template"); ct && !ct->is_null()) {
    if (!ct->is_string()) return invalid_argument("'chat_template' must be a string");
    out->chat_template = ct->as_string();
  }
  if (const Json* kw = body.find("chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return invalid_argument("'chat_template_kwargs' must be an object");
    out->chat_template_kwargs = *kw;
  }
  return Status();
}

}  // namespace kvasir::server
