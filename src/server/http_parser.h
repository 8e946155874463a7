// RequestParser: an incremental HTTP/1.1 request parser. Bytes are fed in whatever pieces the
// socket delivers; it frames one request at a time (Content-Length or chunked body), applies
// the size limits and names the HTTP status of every rejection. Strict by design (CRLF only,
// no obs-fold, no TE+CL) so that no proxy in front of us can frame a request differently.
// Must not do I/O, allocate per byte, or look past the end of the request it is parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace kvasir::http {

struct ParserLimits {
  size_t max_header_bytes = 16 * 1024;       // request line + headers + blank line -> 431
  size_t max_header_count = 100;             // header fields (trailers count too)  -> 431
  size_t max_uri_bytes = 8 * 1024;           // request-target                       -> 414
  size_t max_body_bytes = 32 * 1024 * 1024;  // decoded body                         -> 413
};

class RequestParser {
 public:
  enum class Result { kNeedMore, kComplete, kError };

  // Longest method token accepted (longer: 400); keeps the request-line length bound tight.
  static constexpr size_t kMaxMethodBytes = 32;
  // Longest chunk-size line (size + extensions) accepted (longer: 400).
  static constexpr size_t kMaxChunkLineBytes = 4096;

  explicit RequestParser(const ParserLimits& limits = {});

  // Consumes a prefix of `data` and stores its length in *consumed. Stops right after the end
  // of a request (kComplete: later bytes belong to the next, pipelined request) or at the first
  // error (kError). While complete or failed it consumes nothing.
  Result feed(std::string_view data, size_t* consumed);

  // Moves the completed request out and makes the parser ready for the next one.
  Request take_request();
  // Forgets any partial request (and an error).
  void reset();

  // After kError: 400, 413, 414, 431, 501 or 505, and a short reason for logs.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // At least one byte of the current request was consumed.
  bool started() const { return started_; }
  bool headers_complete() const { return headers_done_; }
  // Once the headers are complete: whether the connection may carry another request.
  bool keep_alive() const { return keep_alive_; }
  // Headers complete, "Expect: 100-continue" on HTTP/1.1, and body bytes still to come.
  bool expects_continue() const;

 private:
  enum class Phase {
    kRequestLine,
    kHeaders,
    kBody,  // Content-Length body
    kChunkSize,
    kChunkData,
    kChunkDataEnd,  // the CRLF after a chunk's data
    kTrailers,
    kComplete,
    kError,
  };

  // Appends bytes of the current line from [*p, end); true once the whole line (CRLF
  // stripped) is in line_. `max_bytes` bounds the line including its CRLF.
  bool take_line(const char** p, const char* end, size_t max_bytes, int over_status);
  void fail(int status, std::string message);
  int classify_long_request_line() const;

  void on_request_line();
  void on_header_line(bool trailer);
  void on_headers_done();
  void on_chunk_size_line();
  void set_body_length(uint64_t length);
  void complete();

  ParserLimits limits_;
  Phase phase_ = Phase::kRequestLine;
  std::string line_;        // the line being assembled, CRLF included until complete
  size_t head_bytes_ = 0;   // completed request-line, header and trailer bytes (CRLFs included)
  size_t num_fields_ = 0;   // headers + trailers seen
  uint64_t remaining_ = 0;  // body or chunk bytes still to read
  bool started_ = false;
  bool headers_done_ = false;
  bool keep_alive_ = false;
  bool expect_continue_ = false;
  bool saw_cr_ = false;  // kChunkDataEnd: the CR has been read
  int error_status_ = 0;
  std::string error_message_;
  Request request_;
};

}  // namespace kvasir::http
