// Chat prompt rendering as the server does it, shared by /v1/chat/completions, /tokenize and
// `kvasir render-template`: finds the template text (a --chat-template file or literal, else the
// model's), adds bos_token / eos_token and the request's chat_template_kwargs, and implements
// vLLM's continue_final_message. Must not tokenize or know about HTTP.
#pragma once

#include <string>

#include "chat/chat_template.h"
#include "common/json.h"
#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::server {

// `flag`: a path to a template file, or the template text itself (it contains "{{" or "{%").
// Empty: the tokenizer's own template (NotFound when the model ships none).
StatusOr<std::string> resolve_chat_template_text(const std::string& flag, const Tokenizer& tok);

struct ChatRenderInput {
  Json messages;  // normalized (normalize_chat_messages_for_template)
  Json tools;     // null or an array
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  Json kwargs;  // null or an object of extra template variables
};

StatusOr<std::string> render_chat_prompt(const ChatTemplate& tmpl, const Tokenizer& tok, const ChatRenderInput& in);

}  // namespace kvasir::server
