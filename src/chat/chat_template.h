// Chat-template rendering as Hugging Face transformers does it (apply_chat_template with
// tokenize=False): normalize the messages, then render the model's Jinja template with messages,
// tools, documents, add_generation_prompt and extra variables (bos_token, eos_token,
// enable_thinking, ...). Output is byte-identical to transformers + jinja2 for supported
// templates. Must not tokenize, pick templates, or know about any model: callers pass the text.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja_template.h"
#include "common/json.h"
#include "common/status.h"

namespace kvasir {

struct ChatTemplateOptions {
  jinja::JinjaLimits limits;
  std::optional<std::tm> now;  // strftime_now()'s clock; nullopt = local time now
  // Apply transformers' message normalization first (normalize_chat_messages below).
  bool hf_normalize_messages = true;
  // transformers' continue_final_message=True: render so that the model continues the last
  // message's content (prefill) instead of starting a new turn. Incompatible with
  // add_generation_prompt.
  bool continue_final_message = false;
};

// A parsed chat template, reusable across requests (parse once per model).
class ChatTemplate {
 public:
  static StatusOr<ChatTemplate> parse(std::string_view template_text, const jinja::JinjaLimits& limits = {});

  // messages: JSON array of message objects. tools: null or a JSON array. extra_vars: null or a
  // JSON object of further variables (bos_token, eos_token, documents, enable_thinking, ...);
  // it may not redefine messages, tools or add_generation_prompt. Template errors, including
  // raise_exception("..."), return kInvalidArgument with "line N: <message>".
  StatusOr<std::string> render(const Json& messages, const Json& tools, bool add_generation_prompt,
                               const Json& extra_vars, const ChatTemplateOptions& opts = {}) const;

 private:
  jinja::Template tmpl_;
  std::string text_;  // continue_final_message checks the template mentions "content"
};

// One-shot parse + render.
StatusOr<std::string> render_chat_template(std::string_view template_text, const Json& messages, const Json& tools,
                                           bool add_generation_prompt, const Json& extra_vars,
                                           const ChatTemplateOptions& opts = {});

// transformers' normalization: drops message keys whose value is null, and when a message has
// reasoning under reasoning_content / thinking / reasoning, exposes it as both `thinking` (first
// key) and `reasoning_content`, as transformers 5 does before rendering.
StatusOr<Json> normalize_chat_messages(const Json& messages);

}  // namespace kvasir
