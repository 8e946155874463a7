#include "server/serving_chat_template.h"

#include <sys/stat.h>

#include "common/mapped_file.h"

namespace kvasir::server {

StatusOr<std::string> resolve_chat_template_text(const std::string& flag, const Tokenizer& tok) {
  if (flag.empty()) {
    if (tok.chat_template().empty()) return not_found("the model has no chat template; pass --chat-template");
    return tok.chat_template();
  }
  struct stat st {};
  if (::stat(flag.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return read_text_file(flag, 1u << 20);
  if (flag.find("{{") != std::string::npos || flag.find("{%") != std::string::npos) return flag;
  return not_found("--chat-template: '" + flag + "' is neither a readable file nor a template");
}

StatusOr<std::string> render_chat_prompt(const ChatTemplate& tmpl, const Tokenizer& tok, const ChatRenderInput& in) {
  Json vars = Json::object();
  vars.set("bos_token", tok.bos_token());
  vars.set("eos_token", tok.eos_token());
  if (in.kwargs.is_object()) {
    for (const auto& [k, v] : in.kwargs.as_object()) vars.set(k, v);
  }
  const bool add_gen = in.add_generation_prompt && !in.continue_final_message;
  KVASIR_ASSIGN_OR_RETURN(std::string text, tmpl.render(in.messages, in.tools, add_gen, vars));
  if (in.continue_final_message && in.messages.is_array() && in.messages.size() > 0) {
    // vLLM: cut everything the template appends after the last message's content, so the
    // model continues that message instead of starting a new turn.
    const Json* content = in.messages.as_array().back().find("content");
    if (content && content->is_string() && !content->as_string().empty()) {
      size_t pos = text.rfind(content->as_string());
      if (pos != std::string::npos) text.resize(pos + content->as_string().size());
    }
  }
  return text;
}

}  // namespace kvasir::server
