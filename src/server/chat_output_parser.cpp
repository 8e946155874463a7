#include "server/chat_output_parser.h"

#include <algorithm>

#include "server/output_parser_adapters.h"

namespace kvasir::server {
Status check_output_parser_config(const OutputParserConfig& config) {
  if (config.enable_auto_tool_choice && config.tool_call_parser.empty()) {
    return invalid_argument("--enable-auto-tool-choice requires --tool-call-parser");
  }
  if (!config.tool_call_parser.empty()) {
    auto p = make_auto_tool_calls(config.tool_call_parser);
    if (!p.ok()) return invalid_argument("--tool-call-parser: " + p.status().message());
  }
  if (!config.reasoning_parser.empty()) {
    auto p = make_reasoning_splitter(config.reasoning_parser, ReasoningContext());
    if (!p.ok()) return invalid_argument("--reasoning-parser: " + p.status().message());
  }
  return Status();
}

bool output_needs_parsing(const OutputParserConfig& config, const ChatTools& tools) {
  return !config.reasoning_parser.empty() || (tools.has_tools() && tools.choice.mode != ToolChoice::Mode::kNone);
}

ChatOutputParser::~ChatOutputParser() = default;

ReasoningContext ReasoningContext::of(const Json& chat_template_kwargs, std::string_view prompt) {
  ReasoningContext c;
  if (chat_template_kwargs.is_object()) c.enable_thinking = chat_template_kwargs.get_bool("enable_thinking", true);
  // Enough to see a trailing "<think>\n" or "</think>\n\n" after the template's own whitespace.
  constexpr size_t kTail = 64;
  c.prompt_tail = std::string(prompt.substr(prompt.size() > kTail ? prompt.size() - kTail : 0));
  return c;
}

StatusOr<std::unique_ptr<ChatOutputParser>> ChatOutputParser::create(const OutputParserConfig& config,
                                                                     const ChatTools& tools,
                                                                     const ReasoningContext& reasoning) {
  std::unique_ptr<ChatOutputParser> p(new ChatOutputParser());
  p->mode_ = tools.has_tools() ? tools.choice.mode : ToolChoice::Mode::kNone;
  p->parallel_tool_calls_ = tools.parallel_tool_calls;
  switch (p->mode_) {
    case ToolChoice::Mode::kNone:
      break;
    case ToolChoice::Mode::kAuto: {
      if (!config.auto_tools()) {
        return invalid_argument("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
      }
      KVASIR_ASSIGN_OR_RETURN(p->auto_, make_auto_tool_calls(config.tool_call_parser));
      break;
    }
    case ToolChoice::Mode::kNamed:
      p->named_ = tools.choice.name;
      p->forced_ = std::make_unique<ForcedToolCallStream>(p->named_);
      break;
    case ToolChoice::Mode::kRequired:
      p->forced_ = std::make_unique<ForcedToolCallStream>("");
      break;
  }
  if (!config.reasoning_parser.empty()) {
    KVASIR_ASSIGN_OR_RETURN(p->reasoning_, make_reasoning_splitter(config.reasoning_parser, reasoning));
  }
  return p;
}

bool ChatOutputParser::needs_special_tokens() const {
  return (auto_ && auto_->needs_special_tokens()) || (reasoning_ && reasoning_->needs_special_tokens());
}

OutputDelta ChatOutputParser::add(std::string_view text, bool finished) {
  OutputDelta out;
  if (reasoning_) {
    std::string content = reasoning_->feed(text, finished, &out.reasoning);
    route_content(content, finished, &out);
  } else {
    route_content(text, finished, &out);
  }
  if (!parallel_tool_calls_) {
    // vLLM: later calls are generated (nothing stops them) but not sent.
    std::erase_if(out.tool_calls, [](const ToolCallDelta& d) { return d.index > 0; });
    num_calls_ = std::min<size_t>(num_calls_, 1);
  }
  return out;
}

void ChatOutputParser::route_content(std::string_view content, bool finished, OutputDelta* out) {
  switch (mode_) {
    case ToolChoice::Mode::kNone:
      out->content.append(content);
      return;
    case ToolChoice::Mode::kAuto:
      auto_->feed(content, finished, out);
      num_calls_ = auto_->num_calls();
      return;
    case ToolChoice::Mode::kNamed:
    case ToolChoice::Mode::kRequired: {
      std::vector<ToolCallDelta> calls = forced_->add(content, &out->content);
      for (ToolCallDelta& c : calls) out->tool_calls.push_back(std::move(c));
      num_calls_ = static_cast<size_t>(forced_->num_calls());
      return;
    }
  }
}

ParsedOutput ChatOutputParser::parse(std::string_view text) {
  ParsedOutput out;
  std::optional<std::string> content = std::string(text);
  if (reasoning_) reasoning_->parse(text, &out.reasoning, &content);
  const std::string body = content.value_or("");
  switch (mode_) {
    case ToolChoice::Mode::kNone:
      out.content = std::move(content);
      break;
    case ToolChoice::Mode::kAuto:
      auto_->parse(body, &out);
      if (out.tool_calls.empty() && !out.content) out.content = std::move(content);
      break;
    case ToolChoice::Mode::kNamed:
      // The grammar made the whole output the function's arguments (vLLM passes it on as is).
      out.tool_calls.push_back(ToolCall{make_tool_call_id(), named_, body});
      break;
    case ToolChoice::Mode::kRequired: {
      auto calls = parse_required_calls(body);
      if (calls) {
        out.tool_calls = std::move(*calls);
      } else {
        out.content = std::move(content);  // not calls (no grammar behind it): the text as it is
      }
      break;
    }
  }
  if (!parallel_tool_calls_ && out.tool_calls.size() > 1) out.tool_calls.resize(1);
  num_calls_ = out.tool_calls.size();
  return out;
}

std::string ChatOutputParser::finish_reason(const std::string& engine_reason) const {
  const bool forced_or_auto = mode_ == ToolChoice::Mode::kAuto || mode_ == ToolChoice::Mode::kRequired;
  if (forced_or_auto && num_calls_ > 0 && engine_reason == "stop") return "tool_calls";
  return engine_reason;
}

}  // namespace kvasir::server
