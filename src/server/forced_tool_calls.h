// Reads tool calls out of output that a grammar forced (vLLM's tool_choice "required" and named
// function paths, which bypass the tool parser): "required" output is a JSON array of
// {"name": ..., "parameters": {...}}, a named function's output is its arguments object.
// Streaming, the array is scanned again as it grows and each call's arguments are passed on as
// the raw JSON text of its "parameters" value, piece by piece, so the pieces concatenate to the
// same arguments the whole-output parse gives. Must not know about HTTP or the engine.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toolcall/tool_parser.h"

namespace kvasir::server {

// What a scan of "required" output found so far.
struct RequiredCallsScan {
  struct Call {
    std::string name;
    bool name_done = false;
    size_t args_begin = 0;  // byte offsets into the text
    size_t args_end = 0;    // end of the value, or of the text while it is still open
    bool args_started = false;
    bool args_done = false;
  };
  std::vector<Call> calls;
  bool valid = true;   // nothing so far breaks the array-of-calls shape
  bool closed = false;  // the closing ']' was seen
};
RequiredCallsScan scan_required_calls(std::string_view text);

// The whole "required" output as calls (ids in OpenAI's "call_" shape, as the tool parsers make
// them); nullopt when it is not a complete array of calls with JSON arguments (a grammar-less
// engine, or a cut-off output).
std::optional<std::vector<ToolCall>> parse_required_calls(std::string_view text);
std::string make_tool_call_id();

// Streaming side of both forced modes. Feed each text delta; it returns the tool-call deltas
// that text completes. When "required" output turns out not to be calls at all, the text so far
// comes back through `fallback_content` and later text too (so nothing is lost).
class ForcedToolCallStream {
 public:
  // named: the function every delta belongs to (named mode); empty: "required" mode.
  explicit ForcedToolCallStream(std::string named_function);

  std::vector<ToolCallDelta> add(std::string_view delta, std::string* fallback_content);
  int num_calls() const { return static_cast<int>(announced_.size()); }

 private:
  std::string named_;
  std::string text_;
  std::vector<std::string> ids_;
  std::vector<bool> announced_;
  std::vector<size_t> sent_;  // bytes of each call's arguments already passed on
  bool fallback_ = false;
};

}  // namespace kvasir::server
