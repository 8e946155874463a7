// ResponseEventStream: the typed server-sent events of a streaming /v1/responses request, built
// from the output parser's deltas: response.created / in_progress, then per output item
// (reasoning, message, function_call) its added / part / delta / done events, then
// response.completed (or incomplete / failed); every event numbered by sequence_number. The
// items it closed are the response's output. Must not know about the engine or sockets.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"
#include "server/chat_output_parser.h"

namespace kvasir::server {

class ResponseEventStream {
 public:
  // "response.created" and "response.in_progress" for the response so far (status in_progress).
  std::string begin(const Json& response);
  // The events one delta makes: items open and close as the output moves from reasoning to
  // text to tool calls.
  std::string add(const OutputDelta& delta);
  // Closes the open item (or adds an empty message when nothing was generated, as the
  // non-streaming answer has one). Then output() is the response's output.
  std::string finish_items();
  // The terminal event for `response`: "response.completed", "response.incomplete" or
  // "response.failed", by its status.
  std::string end(const Json& response);

  // The closed items, for the final response object.
  const Json& output() const { return output_; }
  const std::string& reasoning_text() const { return reasoning_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  Json event(const char* type);
  Json item_event(const char* type);  // about the open item: its item_id and output_index too
  Json part_event(const char* type);  // about the open item's one content part: content_index 0
  std::string open(Kind kind, std::string* out);
  std::string close_item();
  void emit(std::string* out, const Json& e) const;

  int64_t seq_ = 0;
  Json output_ = Json::array();
  Kind kind_ = Kind::kNone;
  int output_index_ = -1;
  std::string item_id_;
  std::string text_;       // the open item's text or arguments so far
  int call_index_ = -1;    // the open call's index in the parser's numbering
  std::string call_id_;
  std::string call_name_;
  std::string reasoning_;  // all reasoning text (for reasoning_tokens)
};

// One SSE frame: "event: <type>\ndata: <json>\n\n".
std::string sse_typed_event(const Json& e);

}  // namespace kvasir::server
