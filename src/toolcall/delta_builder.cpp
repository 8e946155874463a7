#include "toolcall/delta_builder.h"

#include <utility>

#include "common/text_match.h"

namespace kvasir::toolcall {

void DeltaBuilder::content(std::string_view text) {
  if (after_call_) {
    size_t n = count_spaces(text);
    space_after_call_.append(text.substr(0, n));
    text.remove_prefix(n);
    if (text.empty()) return;
    // Text resumes after a call: keep the whitespace between it and earlier text, so the two do not
    // run together; right after a call with nothing before, drop it.
    after_call_ = false;
    if (any_content_) put_content(space_after_call_);
    space_after_call_.clear();
  }
  size_t end = trim_end(text);
  if (end == 0) {
    held_space_.append(text);
    return;
  }
  put_content(held_space_);
  put_content(text.substr(0, end));
  held_space_.assign(text.substr(end));
  any_content_ = true;
}

int DeltaBuilder::begin_call(std::string_view name) {
  held_space_.clear();
  space_after_call_.clear();
  after_call_ = false;
  ToolCallDelta d;
  d.index = static_cast<int>(num_calls_++);
  d.id = ids_.next();
  d.name = std::string(name);
  delta_.tool_calls.push_back(std::move(d));
  return delta_.tool_calls.back().index;
}

void DeltaBuilder::arguments(std::string_view piece) {
  if (piece.empty() || num_calls_ == 0) return;
  int index = static_cast<int>(num_calls_) - 1;
  if (delta_.tool_calls.empty() || delta_.tool_calls.back().index != index) {
    ToolCallDelta d;
    d.index = index;
    delta_.tool_calls.push_back(std::move(d));
  }
  delta_.tool_calls.back().arguments.append(piece);
}

void DeltaBuilder::put_content(std::string_view text) {
  // Text after a call in this delta waits for the next one, so a delta's content always comes
  // before its tool calls.
  (delta_.tool_calls.empty() ? delta_.content : deferred_content_).append(text);
}

void DeltaBuilder::finish() {
  finished_ = true;
  put_content(held_space_);  // empty when the output ended with a call
  held_space_.clear();
  space_after_call_.clear();
}

StreamDelta DeltaBuilder::take() {
  StreamDelta out = std::move(delta_);
  delta_ = StreamDelta();
  delta_.content = std::move(deferred_content_);
  deferred_content_.clear();
  if (finished_) {  // no next delta: the last one carries it (order then loose, see tool_parser.h)
    out.content += delta_.content;
    delta_.content.clear();
  }
  return out;
}

}  // namespace kvasir::toolcall
