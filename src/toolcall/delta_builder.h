// DeltaBuilder: collects what a parser decided since the last feed into one StreamDelta, applying
// the rules every format shares: whitespace next to a tool call is not content (trailing
// whitespace is held until non-space text follows; whitespace after a call is dropped, unless it
// separates text before the call from text after it),
// a call's first delta carries its id and name, arguments pieces of one call merge, and content
// that follows a call within one feed moves to the next delta (a delta's content always precedes
// its tool calls, so a caller can send them in that order).
// It knows nothing of any format.
#pragma once

#include <string>
#include <string_view>

#include "toolcall/tool_call_id.h"
#include "toolcall/tool_parser.h"

namespace kvasir::toolcall {

class DeltaBuilder {
 public:
  DeltaBuilder(ToolCallIdStyle style, uint64_t seed) : ids_(style, seed) {}

  void content(std::string_view text);
  // A call starts: the whitespace held before it is dropped. Returns its index.
  int begin_call(std::string_view name);
  void arguments(std::string_view piece);
  // A tool-call section ended: whitespace right after it is not content.
  void after_calls() { after_call_ = true; }
  // End of output: held whitespace is content after all.
  void finish();

  StreamDelta take();  // what accumulated since the last take
  size_t num_calls() const { return num_calls_; }

 private:
  void put_content(std::string_view text);

  ToolCallIdGenerator ids_;
  StreamDelta delta_;
  std::string deferred_content_;  // content that came after a tool call of delta_
  bool finished_ = false;
  std::string held_space_;        // trailing whitespace of the content so far
  std::string space_after_call_;  // whitespace since the last call ended
  bool after_call_ = false;
  bool any_content_ = false;
  size_t num_calls_ = 0;
};

}  // namespace kvasir::toolcall
