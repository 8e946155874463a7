// The tool-call formats, one file each; tool_parser.cpp's table is the only place that lists them.
// `seed` seeds the parser's call ids.
#pragma once

#include <cstdint>
#include <memory>

#include "toolcall/tool_parser.h"

namespace kvasir::toolcall {

std::unique_ptr<ToolParser> make_hermes_tool_parser(uint64_t seed);
std::unique_ptr<ToolParser> make_llama3_json_tool_parser(uint64_t seed);
std::unique_ptr<ToolParser> make_mistral_tool_parser(uint64_t seed);
std::unique_ptr<ToolParser> make_pythonic_tool_parser(uint64_t seed);
std::unique_ptr<ToolParser> make_deepseek_v3_tool_parser(uint64_t seed);

}  // namespace kvasir::toolcall
