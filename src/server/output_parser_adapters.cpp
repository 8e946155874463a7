#include "server/output_parser_adapters.h"

#include "reasoning/reasoning_parser.h"
#include "toolcall/tool_parser.h"

namespace kvasir::server {
namespace {

class ToolParserAdapter final : public AutoToolCalls {
 public:
  explicit ToolParserAdapter(std::unique_ptr<ToolParser> p) : p_(std::move(p)) {}

  void feed(std::string_view text, bool finished, OutputDelta* out) override {
    if (!text.empty()) append(p_->feed(text), out);
    if (finished) append(p_->finish(), out);
  }

  void parse(std::string_view text, ParsedOutput* out) override {
    ParsedToolCalls pc = p_->parse_complete(text);
    out->tool_calls = std::move(pc.tool_calls);
    // vLLM: with calls, the text around them (null when there is none); without, the text.
    if (out->tool_calls.empty() || !pc.content.empty()) out->content = std::move(pc.content);
  }

  size_t num_calls() const override { return p_->num_tool_calls(); }
  bool needs_special_tokens() const override { return p_->info().needs_special_tokens; }

 private:
  static void append(StreamDelta d, OutputDelta* out) {
    out->content += d.content;
    for (ToolCallDelta& c : d.tool_calls) out->tool_calls.push_back(std::move(c));
  }

  std::unique_ptr<ToolParser> p_;
};

class ReasoningParserAdapter final : public ReasoningSplitter {
 public:
  explicit ReasoningParserAdapter(std::unique_ptr<ReasoningParser> p) : p_(std::move(p)) {}

  std::string feed(std::string_view text, bool finished, std::string* reasoning) override {
    std::string content;
    auto take = [&](ReasoningDelta d) {
      *reasoning += d.reasoning;
      content += d.content;
    };
    if (!text.empty()) take(p_->feed(text));
    if (finished) take(p_->finish());
    return content;
  }

  // vLLM: reasoning null when there is none; content null when the output was all reasoning.
  void parse(std::string_view text, std::optional<std::string>* reasoning,
             std::optional<std::string>* content) override {
    ReasoningResult r = p_->parse_complete(text);
    const bool had_reasoning = !r.reasoning.empty();
    *reasoning = had_reasoning ? std::optional<std::string>(std::move(r.reasoning)) : std::nullopt;
    *content = (had_reasoning && r.content.empty()) ? std::nullopt : std::optional<std::string>(std::move(r.content));
  }

  bool needs_special_tokens() const override { return false; }

 private:
  std::unique_ptr<ReasoningParser> p_;
};

}  // namespace

StatusOr<std::unique_ptr<AutoToolCalls>> make_auto_tool_calls(const std::string& name) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<ToolParser> p, make_tool_parser(name));
  return std::unique_ptr<AutoToolCalls>(new ToolParserAdapter(std::move(p)));
}

StatusOr<std::unique_ptr<ReasoningSplitter>> make_reasoning_splitter(const std::string& name,
                                                                      const ReasoningContext& context) {
  ReasoningParserOptions options;
  options.enable_thinking = context.enable_thinking;
  options.prompt = context.prompt_tail;
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<ReasoningParser> p, make_reasoning_parser(name, options));
  return std::unique_ptr<ReasoningSplitter>(new ReasoningParserAdapter(std::move(p)));
}

}  // namespace kvasir::server
