// Router: the HttpServer's handler for the OpenAI-compatible API. Matches method and path (HEAD
// wherever GET is), checks the API key (constant-time) on every path but /health, /metrics and
// /version, refuses compressed bodies (415), answers 503 while the model loads or the server
// shuts down, counts requests per route and status class for /metrics, and dispatches to the
// serving_* handlers: those that read a body run on its HandlerPool (429 when it is full), the
// rest at once on the I/O thread. Must not parse bodies or touch the engine itself.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "server/handler_pool.h"
#include "server/http_server.h"
#include "server/serving_context.h"

namespace kvasir::server {

class CountingReply;

struct RouterOptions {
  std::string api_key;  // empty: no authentication
  std::string version = "0.1.0";
  HandlerPoolOptions handler_pool;
};

class Router {
 public:
  explicit Router(RouterOptions opts);

  // The model is loaded: start serving (until then every route but /version, /metrics answers 503).
  void set_context(ServingContext* ctx) { ctx_.store(ctx); }
  // New requests get 503 from now on (in-flight ones continue).
  void begin_shutdown() { shutting_down_ = true; }
  // After begin_shutdown: lets the handlers already queued answer, then joins their threads.
  void stop_handlers() { pool_.stop(); }

  void handle(http::Request req, std::shared_ptr<http::Reply> reply);

  // Prometheus text of the HTTP counters and server gauges.
  std::string render_metrics(const std::string& model_name) const;

  enum Route : int {
    kHealth, kMetrics, kVersion, kModels, kCompletions, kChat, kTokenize, kDetokenize, kResponses, kResponseById,
    kOther, kNumRoutes
  };
  void count(int route, int status);

 private:
  // Runs the route's handler; a throwing handler gives 500.
  void run(int route, const http::Request& req, const std::shared_ptr<CountingReply>& reply);
  void dispatch(int route, const http::Request& req, const std::shared_ptr<http::Reply>& reply);
  bool authorized(const http::Request& req) const;

  RouterOptions opts_;
  std::atomic<ServingContext*> ctx_{nullptr};
  std::atomic<bool> shutting_down_{false};
  // [route][status / 100 - 1]: 1xx..5xx
  std::array<std::array<std::atomic<int64_t>, 5>, kNumRoutes> counts_{};
  std::atomic<int64_t> num_rejected_busy_{0};
  HandlerPool pool_;  // last: its threads (which use the rest) stop first
};

// Compares two secrets in time that depends only on their lengths: every byte of the longer one
// is read and folded in, wherever (and whether) they first differ; no early exit.
bool constant_time_equals(std::string_view a, std::string_view b);

namespace detail {
// The comparison over any byte source (at_a(i) / at_b(i) give byte i below len_a / len_b), so
// a test can record which bytes were read. Branch-free in the data.
template <typename AtA, typename AtB>
bool constant_time_equals_impl(size_t len_a, size_t len_b, AtA at_a, AtB at_b) {
  const size_t n = len_a > len_b ? len_a : len_b;
  unsigned char diff = len_a == len_b ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    // Past the end of the shorter one, compare with its last byte (or 0) so the loop does the
    // same work at every index; the length mismatch already made diff non-zero.
    const unsigned char x = len_a == 0 ? 0 : static_cast<unsigned char>(at_a(i < len_a ? i : len_a - 1));
    const unsigned char y = len_b == 0 ? 0 : static_cast<unsigned char>(at_b(i < len_b ? i : len_b - 1));
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}
}  // namespace detail

}  // namespace kvasir::server
