// qwen3: Qwen3 reasons only when its output opens with <think> (...</think>, then the answer);
// with enable_thinking = false its template renders an empty think block into the prompt and the
// output has none, so all of it is content. Templates that end the prompt with "<think>\n"
// (Qwen3-2507 Thinking, Qwen3.5) make the output start inside the reasoning, told through
// ReasoningParserOptions::prompt. A <think> that is never closed (generation cut off) leaves
// the rest as reasoning, as vLLM's streaming and current non-streaming paths do (its older
// non-streaming path returned such output as content). Left out: vLLM's Qwen3.5 rule that a
// <tool_call><function=...> inside the reasoning ends it implicitly.
#include "reasoning/parsers.h"
#include "reasoning/think_tag_parser.h"

namespace kvasir::reasoning {

std::unique_ptr<ReasoningParser> make_qwen3_reasoning_parser(const ReasoningParserOptions& options) {
  ThinkTagConfig config;
  config.name = "qwen3";
  config.starts_in_reasoning = false;
  config.honours_enable_thinking = true;
  return std::make_unique<ThinkTagParser>(config, options);
}

}  // namespace kvasir::reasoning
