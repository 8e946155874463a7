// ChatOutputParser: turns a choice's generated text into what OpenAI clients see, the way vLLM's
// chat and responses servers do: reasoning split off first (--reasoning-parser), then tool calls
// read out of the rest: by the --tool-call-parser for tool_choice "auto", from the grammar-forced
// JSON for "required" and a named function, not at all for "none"; with parallel_tool_calls false
// only the first call is kept. Streaming, text deltas go in
// and content / reasoning / tool-call deltas come out; whole, the finished text is parsed once.
// Used by /v1/chat/completions and /v1/responses; must not know their JSON shapes or HTTP.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "server/chat_tools.h"
#include "server/forced_tool_calls.h"

namespace kvasir::server {

class ReasoningSplitter;
class AutoToolCalls;

// What a text delta became.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// What a whole output became.
struct ParsedOutput {
  std::optional<std::string> reasoning;  // only with a reasoning parser
  std::optional<std::string> content;    // null when the output was only tool calls
  std::vector<ToolCall> tool_calls;
};

// The server's parser configuration (from `kvasir serve` flags), checked once at startup.
struct OutputParserConfig {
  bool enable_auto_tool_choice = false;  // --enable-auto-tool-choice
  std::string tool_call_parser;          // --tool-call-parser, empty: none
  std::string reasoning_parser;          // --reasoning-parser, empty: none
  // Tool parsing for tool_choice "auto" is available (vLLM: both flags).
  bool auto_tools() const { return enable_auto_tool_choice && !tool_call_parser.empty(); }
};

// Refuses unknown parser names (listing the known ones) and --enable-auto-tool-choice without
// --tool-call-parser, as `vllm serve` does at startup.
Status check_output_parser_config(const OutputParserConfig& config);

// What a reasoning parser needs to know of the request: whether the template's thinking is on
// (chat_template_kwargs.enable_thinking) and how the rendered prompt ends (a prompt that opened or
// closed a <think> block decides where the output starts).
struct ReasoningContext {
  bool enable_thinking = true;
  std::string prompt_tail;
  // Reads enable_thinking from chat_template_kwargs (null or an object) and keeps the prompt's end.
  static ReasoningContext of(const Json& chat_template_kwargs, std::string_view prompt);
};

// Whether a request's output goes through a ChatOutputParser at all (else it is plain content).
bool output_needs_parsing(const OutputParserConfig& config, const ChatTools& tools);

class ChatOutputParser {
 public:
  // `tools` is the request's (mode "auto" needs config.auto_tools(): check_tool_choice_supported).
  static StatusOr<std::unique_ptr<ChatOutputParser>> create(const OutputParserConfig& config, const ChatTools& tools,
                                                            const ReasoningContext& reasoning = {});
  ~ChatOutputParser();

  // Streaming: the next text delta of the choice; `finished` on its last one (flushes what a
  // parser held back to see whether a marker was starting).
  OutputDelta add(std::string_view text, bool finished);
  // Whole output (a parser of its own: do not mix with add()).
  ParsedOutput parse(std::string_view text);

  // The finish reason clients see (vLLM): "tool_calls" when calls were made by "auto" or
  // "required" and generation stopped normally; the engine's otherwise (a named function keeps
  // "stop", as OpenAI answers a forced function).
  std::string finish_reason(const std::string& engine_reason) const;
  bool has_reasoning_parser() const { return reasoning_ != nullptr; }
  // The parsers read markers that are special tokens: detokenize with them kept.
  bool needs_special_tokens() const;

 private:
  ChatOutputParser() = default;
  void route_content(std::string_view content, bool finished, OutputDelta* out);

  ToolChoice::Mode mode_ = ToolChoice::Mode::kNone;
  bool parallel_tool_calls_ = true;  // false: calls after the first are dropped (vLLM)
  std::string named_;
  std::unique_ptr<ReasoningSplitter> reasoning_;
  std::unique_ptr<AutoToolCalls> auto_;
  std::unique_ptr<ForcedToolCallStream> forced_;
  size_t num_calls_ = 0;
};

}  // namespace kvasir::server
