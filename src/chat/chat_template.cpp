#include "chat/chat_template.h"

#include "chat/jinja_pystr.h"

namespace kvasir {

StatusOr<Json> normalize_chat_messages(const Json& messages) {
  if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
  Json out = Json::array();
  for (const Json& m : messages.as_array()) {
    if (!m.is_object()) return invalid_argument("each chat message must be a JSON object");
    Json::Object kept;
    for (const auto& [k, v] : m.as_object()) {
      if (!v.is_null()) kept.emplace_back(k, v);
    }
    const Json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      for (const auto& [k, v] : kept) {
        if (k == key) {
          reasoning = &v;
          break;
        }
      }
      if (reasoning) break;
    }
    if (!reasoning) {
      out.push_back(Json(std::move(kept)));
      continue;
    }
    // {"thinking": r, **message, "reasoning_content": r}: Python dict order and overwrite rules.
    Json::Object aliased;
    aliased.emplace_back("thinking", *reasoning);
    for (const auto& [k, v] : kept) {
      if (k == "thinking") {
        aliased[0].second = v;
      } else {
        aliased.emplace_back(k, v);
      }
    }
    Json r = *reasoning;
    bool found = false;
    for (auto& [k, v] : aliased) {
      if (k == "reasoning_content") {
        v = r;
        found = true;
      }
    }
    if (!found) aliased.emplace_back("reasoning_content", std::move(r));
    out.push_back(Json(std::move(aliased)));
  }
  return out;
}

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view template_text, const jinja::JinjaLimits& limits) {
  KVASIR_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(template_text, limits));
  ChatTemplate ct;
  ct.tmpl_ = std::move(t);
  ct.text_ = std::string(template_text);
  return ct;
}

StatusOr<std::string> ChatTemplate::render(const Json& messages, const Json& tools, bool add_generation_prompt,
                                           const Json& extra_vars, const ChatTemplateOptions& opts) const {
  if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) return invalid_argument("tools must be null or a JSON array");
  if (!extra_vars.is_null() && !extra_vars.is_object()) return invalid_argument("extra template variables must be a JSON object");
  Json msgs = messages;
  if (opts.hf_normalize_messages) {
    KVASIR_ASSIGN_OR_RETURN(msgs, normalize_chat_messages(messages));
  }
  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=..., **kwargs)
  Json::Object ctx;
  ctx.emplace_back("messages", std::move(msgs));
  ctx.emplace_back("tools", tools);
  const Json* docs = extra_vars.is_object() ? extra_vars.find("documents") : nullptr;
  ctx.emplace_back("documents", docs ? *docs : Json());
  ctx.emplace_back("add_generation_prompt", Json(add_generation_prompt));
  if (extra_vars.is_object()) {
    for (const auto& [k, v] : extra_vars.as_object()) {
      if (k == "messages" || k == "tools" || k == "add_generation_prompt") {
        return invalid_argument("extra template variables may not redefine '" + k + "'");
      }
      if (k == "documents") continue;
      ctx.emplace_back(k, v);
    }
  }
  jinja::RenderOptions ro;
  ro.limits = opts.limits;
  ro.now = opts.now;
  if (!opts.continue_final_message) return tmpl_.render(Json(std::move(ctx)), ro);

  // transformers: tag the final message's text, render, then cut the output at the tag.
  static const std::string kTag = "CONTINUE_FINAL_MESSAGE_TAG ";
  if (add_generation_prompt) {
    return invalid_argument("continue_final_message and add_generation_prompt are not compatible");
  }
  Json& chat = ctx[0].second;
  if (chat.size() == 0) return invalid_argument("continue_final_message is set but the conversation is empty!");
  Json& last = chat.as_array().back();
  Json* content = last.find("content");
  if (!content || content->is_null()) {
    return invalid_argument("continue_final_message is set but the final message has no \"content\" to continue!");
  }
  if (text_.find("content") == std::string::npos) {
    return invalid_argument("continue_final_message is set to \"content\" but this is not an accepted field in the chat_template");
  }
  std::string final_text;
  if (content->is_array()) {
    Json* block = nullptr;
    for (auto it = content->as_array().rbegin(); it != content->as_array().rend(); ++it) {
      if (it->is_object() && it->contains("text")) {
        block = &*it;
        break;
      }
    }
    if (!block || !block->find("text")->is_string()) {
      return invalid_argument("continue_final_message is set but we could not find any text to continue in the final message!");
    }
    final_text = block->find("text")->as_string();
    block->set("text", final_text + kTag);
  } else if (content->is_string()) {
    final_text = content->as_string();
    *content = Json(final_text + kTag);
  } else {
    return invalid_argument("continue_final_message needs the final message's content to be text");
  }
  KVASIR_ASSIGN_OR_RETURN(std::string out, tmpl_.render(Json(std::move(ctx)), ro));
  const std::string stripped_tag = "CONTINUE_FINAL_MESSAGE_TAG";
  std::string stripped_final = jinja::py::strip(final_text, std::nullopt, true, true);
  if (out.find(stripped_final) == std::string::npos || out.find(stripped_tag) == std::string::npos) {
    return invalid_argument("continue_final_message is set but the final message does not appear in the chat after "
                            "applying the chat template");
  }
  size_t at = out.rfind(stripped_tag);
  if (out.compare(at, kTag.size(), kTag) == 0) return out.substr(0, at);
  return jinja::py::strip(std::string_view(out).substr(0, at), std::nullopt, false, true);
}

StatusOr<std::string> render_chat_template(std::string_view template_text, const Json& messages, const Json& tools,
                                           bool add_generation_prompt, const Json& extra_vars,
                                           const ChatTemplateOptions& opts) {
  KVASIR_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(template_text, opts.limits));
  return t.render(messages, tools, add_generation_prompt, extra_vars, opts);
}

}  // namespace kvasir
