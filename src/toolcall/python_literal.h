// Python literals as models write them in pythonic tool calls (get_weather(city='SF', days=3)),
// converted to JSON as vLLM does (ast literal, then json.dumps): str, int, float, True/False/None,
// lists, tuples (as arrays), dicts (int/bool/None/float keys become strings, as json.dumps makes
// them), and signed numbers. Everything else - names, calls, bytes, f-strings, sets, complex or
// non-finite numbers, integers past int64 - is refused: such a call is not one we can pass on.
// PyLiteralEnd finds where a literal ends in text that arrives in pieces.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::toolcall {

StatusOr<Json> parse_python_literal(std::string_view text);

// Finds the end of one call argument's value: the first ',' or ')' outside brackets and strings.
// It does not validate (parse_python_literal does, once the end is known).
class PyLiteralEnd {
 public:
  enum class State { kMore, kDone, kError };
  static constexpr size_t kMaxDepth = 64;
  // Scans `in`, the value's next bytes. *consumed counts the bytes that belong to the value (all
  // of `in` unless it ended; a quote whose kind needs 2 bytes of lookahead waits for them unless
  // eof). kDone: the value ended before in[*consumed], which is the ',' or ')'.
  State scan(std::string_view in, bool eof, size_t* consumed);

 private:
  State state_ = State::kMore;
  std::vector<char> stack_;
  char quote_ = 0;       // inside a string: its quote character
  bool triple_ = false;
  bool escape_ = false;  // the previous byte was a backslash inside a string
  int closing_ = 0;      // quotes seen in a row at the end of a triple-quoted string
};

}  // namespace kvasir::toolcall
