// Reasoning parsers (vLLM's `--reasoning-parser NAME`): a reasoning model's output -> the
// `reasoning_content` (<think> ... </think>) and the `content`, all at once or as the text
// streams, and where reasoning ends (structured-output constraints start there). Pure text in,
// plain data out: no tokenizer, engine or server types.
//
// Whitespace at the edges of the reasoning and right after </think> is dropped (Qwen's own
// example parsing strips those newlines); content is otherwise verbatim, and an output without
// reasoning comes back byte for byte. Streamed pieces never end inside a UTF-8 character or a
// possible tag, and streaming any split of a text gives what parse_complete gives.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvasir {

struct ReasoningResult {
  std::string reasoning;  // "" when there was none
  std::string content;
};

struct ReasoningDelta {
  std::string reasoning;  // comes before `content` when a delta has both
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

struct ReasoningParserOptions {
  // chat_template_kwargs.enable_thinking: false means no reasoning at all (qwen3).
  bool enable_thinking = true;
  // The rendered prompt, or at least its end. A prompt ending in "<think>" (Qwen3-2507 Thinking,
  // Qwen3.5, DeepSeek-R1-0528 templates) means the output starts inside the reasoning; one ending
  // in "</think>" (templates with thinking switched off) means it has none. Not kept.
  std::string_view prompt;
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  virtual std::string_view name() const = 0;

  // Streaming: feed each new piece of text in order, then finish() once; feed after finish aborts.
  virtual ReasoningDelta feed(std::string_view delta) = 0;
  virtual ReasoningDelta finish() = 0;
  // Reasoning is over, or there is none: everything fed from now on is content.
  virtual bool reasoning_ended() const = 0;

  // The whole output at once, on a fresh state (the stream's is neither read nor changed).
  virtual ReasoningResult parse_complete(std::string_view model_output) const = 0;
  // Would reasoning be over after `output_so_far` (text generated so far, e.g. detokenized
  // tokens)? Stateless: it runs a fresh parser over the text, so it costs O(length); a caller
  // checking after every token should feed() instead and ask reasoning_ended().
  virtual bool is_reasoning_end(std::string_view output_so_far) const = 0;
};

// `name`: deepseek_r1, qwen3. An unknown name is invalid_argument listing the supported ones.
StatusOr<std::unique_ptr<ReasoningParser>> make_reasoning_parser(std::string_view name,
                                                                  const ReasoningParserOptions& options = {});
std::vector<std::string> reasoning_parser_names();

}  // namespace kvasir
