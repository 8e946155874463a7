#include "server/output_parser_adapters.h"

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

}  // namespace

StatusOr<std::unique_ptr<AutoToolCalls>> make_auto_tool_calls(const std::string& name) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<ToolParser> p, make_tool_parser(name));
  return std::unique_ptr<AutoToolCalls>(new ToolParserAdapter(std::move(p)));
}

// Until the reasoning/ library is merged no reasoning parser name is known.
StatusOr<std::unique_ptr<ReasoningSplitter>> make_reasoning_splitter(const std::string& name) {
  return invalid_argument("unknown reasoning parser '" + name + "'");
}

}  // namespace kvasir::server
