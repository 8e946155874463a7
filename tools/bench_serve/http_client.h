// HttpConnection: one blocking TCP connection for the benchmark client, with a
// deadline on every wait (poll), plus the small helpers around it: parsing
// --base-url and writing a request head. Plain HTTP only (the benchmark targets
// loopback servers). Must not interpret responses (http_response_parser.h does)
// or know about OpenAI requests (openai_request.h does).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvasir::bench {

using Clock = std::chrono::steady_clock;

struct BaseUrl {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string path_prefix; // "" or "/something" (no trailing slash)
};

// "http://host[:port][/prefix]"; https is refused (no TLS in the client).
StatusOr<BaseUrl> parse_base_url(std::string_view url);

// "POST /v1/completions HTTP/1.1" with Host, Content-Type: application/json,
// Content-Length and `extra_headers` ("Name: value" each), then the body.
std::string build_post_request(const BaseUrl &url, const std::string &path,
                               std::string_view body,
                               const std::vector<std::string> &extra_headers);

class HttpConnection {
public:
  HttpConnection() = default;
  ~HttpConnection();
  HttpConnection(HttpConnection &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  HttpConnection &operator=(HttpConnection &&o) noexcept;
  HttpConnection(const HttpConnection &) = delete;
  HttpConnection &operator=(const HttpConnection &) = delete;

  // Resolves host (numeric or a name) and connects, waiting at most until
  // `deadline`.
  static StatusOr<HttpConnection> connect(const std::string &host, int port,
                                          Clock::time_point deadline);
  Status send_all(std::string_view data, Clock::time_point deadline);
  // Waits for bytes and reads up to `cap` of them into buf; 0 means the peer
  // closed.
  StatusOr<size_t> read_some(char *buf, size_t cap, Clock::time_point deadline);
  void close();

private:
  explicit HttpConnection(int fd) : fd_(fd) {}
  // Waits for `events` on fd_; error on timeout.
  Status wait_for(short events, Clock::time_point deadline);
  int fd_ = -1;
};

} // namespace kvasir::bench
