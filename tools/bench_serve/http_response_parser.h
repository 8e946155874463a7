// ResponseParser: an incremental HTTP/1.1 response parser for the benchmark
// client. It reads the status line and headers, then frames the body the three
// ways a server may send it (Content-Length, chunked, or delimited by the
// server closing the connection) and hands back the decoded body bytes as they
// arrive, so a streaming (SSE) body can be consumed while it flows. Must not do
// I/O or interpret the body (sse.h splits events); interim 1xx responses are
// skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvasir::bench {

class ResponseParser {
public:
  enum class Result { kNeedMore, kComplete, kError };
  // Longest status, header or chunk-size line accepted; longer is an error,
  // never unbounded growth.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // `head_response`: the request was HEAD, so the response has no body whatever
  // its headers say.
  explicit ResponseParser(bool head_response = false)
      : head_response_(head_response) {}

  // Consumes all of `data`, appending decoded body bytes to *body. Bytes after
  // the end of the response are ignored (the client never pipelines).
  Result feed(std::string_view data, std::string *body);
  // The peer closed the connection: completes a close-delimited body; an error
  // anywhere else.
  Result finish();

  bool complete() const { return phase_ == Phase::kComplete; }
  bool headers_complete() const { return headers_done_; }
  int status() const { return status_; }
  const std::string &error_message() const { return error_; }
  // The value of the first header `name` (case-insensitive), if present.
  std::optional<std::string> header(std::string_view name) const;
  bool chunked() const { return chunked_; }
  bool close_delimited() const { return phase_ == Phase::kUntilClose; }

private:
  enum class Phase {
    kStatusLine,
    kHeaders,
    kBody,
    kUntilClose,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailers,
    kComplete,
    kError
  };

  // Appends bytes of the current line from [*p, end); true once the whole line
  // is in line_ (the LF and an optional CR before it stripped).
  bool take_line(const char **p, const char *end);
  Result fail(std::string message);
  bool on_status_line();
  bool on_header_line();
  bool on_headers_done();
  bool on_chunk_size_line();

  Phase phase_ = Phase::kStatusLine;
  bool head_response_ = false;
  bool headers_done_ = false;
  bool chunked_ = false;
  int status_ = 0;
  uint64_t remaining_ = 0; // body or chunk bytes still to come
  std::string line_;
  std::string error_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

} // namespace kvasir::bench
