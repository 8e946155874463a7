// SseSplitter: splits a text/event-stream body into events as its bytes arrive,
// per the HTML Server-Sent Events rules: lines end in LF, CRLF or CR; a blank
// line ends an event; `data:` lines join with LF; `:` lines are comments
// (keep-alive pings). Only `event` and `data` are kept. Must not parse the data
// (the caller decides whether it is JSON or [DONE]).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvasir::bench {

struct SseEvent {
  std::string event; // "" when the event named none ("message")
  std::string data;
};

class SseSplitter {
public:
  // Longest line buffered; a longer one is cut off there (its event's data is
  // truncated).
  static constexpr size_t kMaxLineBytes = 16u << 20;

  // Appends each event completed by `bytes` to *out.
  void feed(std::string_view bytes, std::vector<SseEvent> *out);
  // End of stream: an event without its blank line is dropped, as the spec
  // says.
  void reset();

private:
  void on_line(std::vector<SseEvent> *out);

  std::string line_;
  bool after_cr_ =
      false; // the previous byte was CR, so an LF now ends nothing new
  bool has_data_ = false;
  SseEvent current_;
};

} // namespace kvasir::bench
