// HttpServer: an HTTP/1.1 server on epoll (no third-party framework): a small fixed set of I/O
// threads accept, read and parse requests (limits on header size and count, URI length, body
// size and read time), call the Handler, and write responses. Keep-alive and pipelining-safe.
// A handler either answers at once (Reply::respond) or takes a Stream and writes server-sent
// events or chunks later from any thread; the stream reports when the client went away, so the
// caller can abort the work. Must not know about OpenAI, the engine or JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/blocking_queue.h"
#include "common/status.h"
#include "server/http_types.h"

namespace kvasir::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: pick a free port (see HttpServer::port())
  int num_io_threads = 2;
  size_t max_header_bytes = 16 * 1024;     // request line + headers  -> 431
  size_t max_header_count = 100;           //                        -> 431
  size_t max_uri_bytes = 8 * 1024;         //                        -> 414
  size_t max_body_bytes = 32 * 1024 * 1024;  //                      -> 413
  std::chrono::milliseconds header_timeout{10000};  // whole request must arrive in time -> 408
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive idle connection closed
  size_t max_connections = 4096;           // beyond: accept and close with 503
  // The body of the answers the transport gives on its own (400/408/413/414/431/501/503 before
  // any handler runs, 500 when a handler throws). `detail` is the parser's reason for a refused
  // request ("missing Host header"; our own fixed text, never client bytes), else empty. Unset: a
  // text/plain reason phrase. Must not block or throw; its Content-Length and Connection headers
  // are set by the server.
  std::function<Response(int status, std::string_view detail)> error_page;
};

// A response body written over time (SSE or chunked). Thread-safe; writes after the client
// disconnected are dropped and return false.
class Stream {
 public:
  virtual ~Stream() = default;
  // Sends the status line and headers (Transfer-Encoding: chunked). Call once, first.
  virtual bool start(int status, const std::vector<std::pair<std::string, std::string>>& headers) = 0;
  // Sends one chunk (e.g. "data: {...}\n\n").
  virtual bool write(std::string_view data) = 0;
  // Ends the body; the connection goes back to keep-alive.
  virtual void finish() = 0;
  // True once the peer closed or reset the connection (or the server is shutting down hard).
  virtual bool closed() const = 0;
};

// How a handler answers one request: exactly one of respond() or stream() must be called,
// possibly later and from another thread (keep the Reply alive by holding the shared_ptr).
class Reply {
 public:
  virtual ~Reply() = default;
  virtual void respond(Response response) = 0;
  virtual std::shared_ptr<Stream> stream() = 0;
  // True once the client disconnected (while the request was queued or being processed).
  virtual bool client_gone() const = 0;
  // Pushes `token` onto `queue` when the client disconnects (at once if it already has), from
  // the I/O thread that notices, so whoever waits on the queue learns of it without polling.
  // One watcher per request (a later call replaces it); it lapses once the answer is complete.
  virtual void notify_when_gone(std::shared_ptr<BlockingQueue<uint64_t>> queue, uint64_t token) = 0;
};

using Handler = std::function<void(Request request, std::shared_ptr<Reply> reply)>;

class HttpServer {
 public:
  HttpServer(const ServerOptions& options, Handler handler);
  ~HttpServer();

  // Binds and listens; then serves on the I/O threads until stop().
  Status start();
  int port() const;  // the bound port
  // Stops accepting new connections (closes the listener); open ones continue.
  void stop_accepting();
  // Closes every connection and joins the I/O threads.
  void stop();
  size_t num_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::http
