// deepseek_r1: DeepSeek-R1 (and its distills, QwQ) always reason first. Newer templates put
// "<think>\n" in the prompt, older ones let the model write it, so the output starts inside the
// reasoning with or without an opening <think>, and everything until </think> is reasoning
// (all of it when </think> never comes, as in vLLM). A prompt that already closed the think
// block (DeepSeek V3.1 with thinking off) means the output is all content.
#include "reasoning/parsers.h"
#include "reasoning/think_tag_parser.h"

namespace kvasir::reasoning {

std::unique_ptr<ReasoningParser> make_deepseek_r1_reasoning_parser(const ReasoningParserOptions& options) {
  ThinkTagConfig config;
  config.name = "deepseek_r1";
  config.starts_in_reasoning = true;
  return std::make_unique<ThinkTagParser>(config, options);
}

}  // namespace kvasir::reasoning
