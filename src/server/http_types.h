// Plain HTTP/1.1 request and response types shared by the transport (http_server) and the
// OpenAI routes. Header names are stored lower-cased. Must not do I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvasir::http {

struct Request {
  std::string method;   // "GET", "POST", ...
  std::string target;   // raw request-target, e.g. "/v1/models?x=1"
  std::string path;     // target without the query string, percent-decoding NOT applied
  std::string query;    // after '?', may be empty
  int version_minor = 1;  // HTTP/1.x
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  std::string remote_addr;

  // First header with this (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return &v;
    }
    return nullptr;
  }
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. {"Content-Type", "application/json"}
  std::string body;
};

const char* status_reason(int status);

// The status line and headers of a response, through the blank line. `framing` is the
// "Content-Length: N" or "Transfer-Encoding: chunked" line (or empty); Connection is set from
// `keep_alive`. The caller's Content-Length, Transfer-Encoding and Connection headers and any
// header containing CR or LF are dropped; Date and "Server: kvasir" are added unless given.
std::string format_response_head(int status,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 std::string_view framing, bool keep_alive);

}  // namespace kvasir::http
