// Jinja parser: tokens -> Program, following jinja2's grammar and operator precedence (including
// its quirks, e.g. `-2 ** 2` is `(-2) ** 2`, filters bind tighter than unary minus's operand).
// Rejects what HF's environment would reject at compile time (unknown filters/tests, `break`
// outside a loop) and what this engine does not support (include, import, extends, blocks,
// recursive loops) with a clear error. Bounds nesting depth; evaluates nothing.
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"
#include "common/status.h"

namespace kvasir::jinja {

struct ParseLimits {
  size_t max_template_bytes = 1u << 20;
  size_t max_tokens = 1u << 20;
  int max_nesting_depth = 100;  // expression tree depth and statement nesting
};

StatusOr<std::shared_ptr<const Program>> parse_template(std::string_view source, const ParseLimits& limits);

bool filter_exists(std::string_view name);  // jinja_filters.cpp
bool test_exists(std::string_view name);    // jinja_istests.cpp

}  // namespace kvasir::jinja
