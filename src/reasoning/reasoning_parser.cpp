#include "reasoning/reasoning_parser.h"

#include <algorithm>

#include "reasoning/parsers.h"

namespace kvasir {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<ReasoningParser> (*make)(const ReasoningParserOptions& options);
};

// The one list of reasoning parsers.
constexpr Entry kParsers[] = {
    {"deepseek_r1", reasoning::make_deepseek_r1_reasoning_parser},
    {"qwen3", reasoning::make_qwen3_reasoning_parser},
};

}  // namespace

std::vector<std::string> reasoning_parser_names() {
  std::vector<std::string> names;
  for (const Entry& e : kParsers) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::unique_ptr<ReasoningParser>> make_reasoning_parser(std::string_view name,
                                                                  const ReasoningParserOptions& options) {
  for (const Entry& e : kParsers) {
    if (name == e.name) return e.make(options);
  }
  std::string list;
  for (const std::string& n : reasoning_parser_names()) list += (list.empty() ? "" : ", ") + n;
  return invalid_argument("unknown reasoning parser '" + std::string(name) + "'; supported: " + list);
}

}  // namespace kvasir
