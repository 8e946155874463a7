// The reasoning formats, one file each; reasoning_parser.cpp's table is the only list of them.
#pragma once

#include <memory>

#include "reasoning/reasoning_parser.h"

namespace kvasir::reasoning {

std::unique_ptr<ReasoningParser> make_deepseek_r1_reasoning_parser(const ReasoningParserOptions& options);
std::unique_ptr<ReasoningParser> make_qwen3_reasoning_parser(const ReasoningParserOptions& options);

}  // namespace kvasir::reasoning
