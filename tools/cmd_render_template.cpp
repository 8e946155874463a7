// `kvasir render-template`: prints the prompt the server would build for a chat request
// (same message normalization, bos/eos variables and template), exactly, without a newline.
#include <cstdio>
#include <string>

#include "setup/loaded_model.h"
#include "args.h"
#include "commands.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "server/openai_protocol.h"
#include "server/serving_chat_template.h"

namespace kvasir {
namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: kvasir render-template [--model PATH] [--chat-template FILE] --messages FILE.json\n"
               "                              [--tools FILE.json] [--add-generation-prompt] [--continue-final-message]\n"
               "                              [--var NAME=JSON ...]\n"
               "Prints the rendered prompt exactly (no trailing newline).\n");
}

StatusOr<Json> read_json_file(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(path, 64u << 20));
  auto j = parse_json(text);
  if (!j.ok()) return invalid_argument(path + ": " + j.status().message());
  return j;
}

Status run(const Args& a, std::string* out) {
  if (!a.has("messages")) return invalid_argument("--messages FILE.json is required");
  auto m = load_tokenizer_only(a.get("model", default_model_path()));
  if (!m.ok()) return m.status();
  KVASIR_ASSIGN_OR_RETURN(std::string text, server::resolve_chat_template_text(a.get("chat-template"), *(*m)->tokenizer));
  KVASIR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(text));
  KVASIR_ASSIGN_OR_RETURN(Json raw, read_json_file(a.get("messages")));
  // Accept a bare list or a request body with "messages" (and "tools").
  const Json* msgs = raw.is_object() ? raw.find("messages") : &raw;
  if (!msgs) return invalid_argument("--messages: no 'messages' list");
  server::ChatRenderInput in;
  KVASIR_ASSIGN_OR_RETURN(in.messages, server::normalize_chat_messages_for_template(*msgs));
  if (a.has("tools")) {
    KVASIR_ASSIGN_OR_RETURN(in.tools, read_json_file(a.get("tools")));
    if (!in.tools.is_array()) return invalid_argument("--tools must hold a JSON list");
  } else if (raw.is_object() && raw.find("tools") && raw.find("tools")->is_array()) {
    in.tools = *raw.find("tools");
  }
  in.add_generation_prompt = a.get_bool("add-generation-prompt", false);
  in.continue_final_message = a.get_bool("continue-final-message", false);
  in.kwargs = Json::object();
  for (const std::string& v : a.get_all("var")) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("--var wants NAME=JSON, got '" + v + "'");
    auto value = parse_json(std::string_view(v).substr(eq + 1));
    if (!value.ok()) return invalid_argument("--var " + v.substr(0, eq) + ": " + value.status().message());
    in.kwargs.set(v.substr(0, eq), std::move(*value));
  }
  KVASIR_ASSIGN_OR_RETURN(*out, server::render_chat_prompt(tmpl, *(*m)->tokenizer, in));
  return Status();
}

}  // namespace

int cmd_render_template(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"model", "chat-template", "messages", "tools", "var"},
                          {"add-generation-prompt", "continue-final-message", "help"});
  if (!args.ok() || args->get_bool("help", false)) {
    if (!args.ok()) std::fprintf(stderr, "kvasir render-template: %s\n", args.status().message().c_str());
    print_usage();
    return args.ok() ? 0 : 2;
  }
  std::string out;
  if (Status st = run(*args, &out); !st.ok()) {
    std::fprintf(stderr, "kvasir render-template: %s\n", st.message().c_str());
    return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace kvasir
