// IoLoop: one I/O thread of the HttpServer: its own epoll set, the connections the acceptor
// hands it (owned outright: level-triggered epoll, non-blocking sockets), and a mailbox through
// which other threads reach them (http_outbox.h). Knows HTTP framing, not routes.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/http_server.h"

namespace kvasir::http {

class IoLoop {
 public:
  IoLoop(const ServerOptions& options, const Handler& handler, std::atomic<size_t>& num_connections,
         std::atomic<bool>& draining);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  Status init();
  // From the acceptor: a new connection (counted in num_connections) for this loop.
  void post_accepted(int fd, std::string remote);
  void request_stop();
  void run();  // on the loop's own thread, until request_stop()

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The bytes of a complete refusal (options.error_page, else a plain-text reason); `detail` is the
// parser's fixed reason, if any.
std::string error_response(const ServerOptions& options, int status, std::string_view detail = {});

}  // namespace kvasir::http
