#include "server/routes.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <optional>
#include <string_view>

#include "common/log.h"
#include "server/openai_protocol.h"
#include "server/serving_handlers.h"

namespace kvasir::server {
namespace {

struct RouteSpec {
  const char* path;
  const char* method;
  int route;
};

constexpr RouteSpec kRoutes[] = {
    {"/health", "GET", Router::kHealth},
    {"/metrics", "GET", Router::kMetrics},
    {"/version", "GET", Router::kVersion},
    {"/v1/models", "GET", Router::kModels},
    {"/v1/completions", "POST", Router::kCompletions},
    {"/v1/chat/completions", "POST", Router::kChat},
    {"/tokenize", "POST", Router::kTokenize},
    {"/detokenize", "POST", Router::kDetokenize},
    {"/v1/responses", "POST", Router::kResponses},
};

constexpr const char* kRouteNames[] = {"/health",     "/metrics",     "/version",     "/v1/models",
                                       "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize",
                                       "/v1/responses", "/v1/responses/{id}", "other"};
static_assert(sizeof(kRouteNames) / sizeof(kRouteNames[0]) == Router::kNumRoutes);

constexpr size_t kResponsesPrefixLen = 14;  // "/v1/responses/"

// What a probe or scraper reads without a key (vLLM's exceptions); every other path needs it.
bool is_public_path(const std::string& path) {
  return path == "/health" || path == "/metrics" || path == "/version";
}

// The routes whose handler reads the body: they run on the HandlerPool, off the I/O threads.
bool reads_body(int route) {
  return route == Router::kCompletions || route == Router::kChat || route == Router::kResponses ||
         route == Router::kTokenize || route == Router::kDetokenize;
}

bool method_matches(const std::string& method, std::string_view route_method) {
  return method == route_method || (method == "HEAD" && route_method == "GET");
}

// A compressed body would reach the JSON parser as binary; say what is wrong instead.
std::optional<std::string> unsupported_content_encoding(const http::Request& req) {
  const std::string* enc = req.header("content-encoding");
  if (enc == nullptr || req.body.empty()) return std::nullopt;
  std::string lower = *enc;  // the parser trimmed the value
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "identity") return std::nullopt;
  return enc->substr(0, 64);
}

// Loading, shutting down, or a dead engine: clients and balancers should retry (elsewhere).
http::Response unavailable_response(const std::string& message) {
  http::Response r = error_response({503, message, "server_error", "", "service_unavailable"});
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace

// Counts the status a handler answers with, whenever and from whichever thread it answers.
class CountingReply final : public http::Reply {
 public:
  CountingReply(std::shared_ptr<http::Reply> inner, Router* router, int route)
      : inner_(std::move(inner)), router_(router), route_(route) {}
  void respond(http::Response response) override {
    answered_ = true;
    router_->count(route_, response.status);
    inner_->respond(std::move(response));
  }
  std::shared_ptr<http::Stream> stream() override {
    answered_ = true;
    router_->count(route_, 200);
    return inner_->stream();
  }
  bool client_gone() const override { return inner_->client_gone(); }
  void notify_when_gone(std::shared_ptr<BlockingQueue<uint64_t>> queue, uint64_t token) override {
    inner_->notify_when_gone(std::move(queue), token);
  }
  bool answered() const { return answered_; }

 private:
  std::shared_ptr<http::Reply> inner_;
  Router* router_;
  int route_;
  std::atomic<bool> answered_{false};
};

bool constant_time_equals(std::string_view a, std::string_view b) {
  return detail::constant_time_equals_impl(a.size(), b.size(), [a](size_t i) { return a[i]; },
                                           [b](size_t i) { return b[i]; });
}

Router::Router(RouterOptions opts) : opts_(std::move(opts)), pool_(opts_.handler_pool) {
  for (auto& row : counts_) {
    for (auto& c : row) c.store(0);
  }
}

void Router::count(int route, int status) {
  const int cls = status / 100 - 1;
  if (route < 0 || route >= kNumRoutes || cls < 0 || cls >= 5) return;
  counts_[static_cast<size_t>(route)][static_cast<size_t>(cls)].fetch_add(1, std::memory_order_relaxed);
}

bool Router::authorized(const http::Request& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string* h = req.header("authorization");
  return h != nullptr && constant_time_equals(*h, "Bearer " + opts_.api_key);
}

void Router::handle(http::Request req, std::shared_ptr<http::Reply> reply) {
  int route = kOther;
  bool path_known = false;
  std::string allow;
  for (const RouteSpec& r : kRoutes) {
    if (req.path != r.path) continue;
    path_known = true;
    allow = std::string_view(r.method) == "GET" ? "GET, HEAD" : r.method;
    if (method_matches(req.method, r.method)) route = r.route;
  }
  if (!path_known && req.path.rfind("/v1/models/", 0) == 0 && req.path.size() > 11) {
    path_known = true;
    allow = "GET, HEAD";
    if (method_matches(req.method, "GET")) route = kModels;
  }
  if (!path_known && req.path.rfind("/v1/responses/", 0) == 0 && req.path.size() > kResponsesPrefixLen) {
    path_known = true;
    allow = "GET, HEAD, DELETE";
    if (method_matches(req.method, "GET") || req.method == "DELETE") route = kResponseById;
  }
  auto counted = std::make_shared<CountingReply>(std::move(reply), this, route);
  // One rule for the key, before anything else: unknown paths and wrong methods learn nothing.
  if (!is_public_path(req.path) && !authorized(req)) {
    return counted->respond(error_response({401, "Incorrect API key provided.", "invalid_request_error", "", "invalid_api_key"}));
  }
  if (path_known && route == kOther) {
    http::Response r = error_response({405, "Method " + req.method + " is not allowed on " + req.path + "; use " + allow + ".",
                                       "invalid_request_error", "", "method_not_allowed"});
    r.headers.emplace_back("Allow", allow);
    return counted->respond(std::move(r));
  }
  if (auto enc = unsupported_content_encoding(req)) {
    return counted->respond(error_response({415, "Content-Encoding '" + *enc + "' is not supported; send the body uncompressed.",
                                            "invalid_request_error", "", "unsupported_media_type"}));
  }
  if (!reads_body(route) || ctx_.load() == nullptr || shutting_down_) return run(route, req, counted);
  const size_t bytes = req.body.size();
  const bool taken = pool_.try_submit(bytes, [this, route, req = std::move(req), counted] {
    if (counted->client_gone()) {  // gave up while queued: do not prepare a prompt for no one
      if (ServingContext* ctx = ctx_.load()) ctx->num_aborted_by_client.fetch_add(1);
      return;
    }
    run(route, req, counted);
  });
  if (!taken) {
    num_rejected_busy_.fetch_add(1);
    http::Response r = error_response({429, "The server is busy preparing other requests; retry later.", "rate_limit_error", "",
                                       "rate_limit_exceeded"});
    r.headers.emplace_back("Retry-After", "1");
    counted->respond(std::move(r));
  }
}

void Router::run(int route, const http::Request& req, const std::shared_ptr<CountingReply>& counted) {
  try {
    dispatch(route, req, counted);
  } catch (const std::exception& e) {
    KVASIR_LOG_ERROR("handler for %s threw: %s", req.path.c_str(), e.what());
    if (!counted->answered()) counted->respond(error_response({500, "internal server error", "server_error", "", "internal_error"}));
  } catch (...) {
    KVASIR_LOG_ERROR("handler for %s threw", req.path.c_str());
    if (!counted->answered()) counted->respond(error_response({500, "internal server error", "server_error", "", "internal_error"}));
  }
}

void Router::dispatch(int route, const http::Request& req, const std::shared_ptr<http::Reply>& reply) {
  ServingContext* ctx = ctx_.load();
  switch (route) {
    case kOther:
      return reply->respond(error_response({404, "Not Found: " + req.path, "invalid_request_error", "", "not_found"}));
    case kVersion: {
      Json v = Json::object();
      v.set("version", opts_.version);
      return reply->respond(json_response(200, v));
    }
    case kMetrics: {
      http::Response r;
      r.headers.emplace_back("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      const std::string name = ctx ? ctx->model_name() : std::string();
      if (ctx) r.body = ctx->engine().render_prometheus(name);
      r.body += render_metrics(name);
      return reply->respond(std::move(r));
    }
    case kHealth:
      if (!ctx) return reply->respond(unavailable_response("The model is still loading."));
      if (shutting_down_) return reply->respond(unavailable_response("The server is shutting down."));
      if (ctx->engine().dead()) return reply->respond(unavailable_response("The engine has failed: " + ctx->engine().fault()));
      return reply->respond(http::Response{200, {{"Content-Type", "text/plain"}}, ""});
    default:
      break;
  }
  if (shutting_down_) return reply->respond(unavailable_response("The server is shutting down."));
  if (!ctx) return reply->respond(unavailable_response("The model is still loading."));
  if (ctx->engine().dead()) return reply->respond(unavailable_response("The engine has failed: " + ctx->engine().fault()));
  switch (route) {
    case kModels:
      return reply->respond(serve_models(*ctx, req.path.size() > 11 ? req.path.substr(11) : std::string()));
    case kCompletions:
      return serve_completions(*ctx, req, reply);
    case kChat:
      return serve_chat_completions(*ctx, req, reply);
    case kTokenize:
      return serve_tokenize(*ctx, req, *reply);
    case kDetokenize:
      return serve_detokenize(*ctx, req, *reply);
    case kResponses:
      return serve_responses(*ctx, req, reply);
    case kResponseById:
      return reply->respond(serve_stored_response(*ctx, req.method, req.path.substr(kResponsesPrefixLen)));
    default:
      return reply->respond(error_response({404, "Not Found: " + req.path, "invalid_request_error", "", "not_found"}));
  }
}

std::string Router::render_metrics(const std::string& model_name) const {
  std::string o;
  o += "# HELP kvasir:http_requests_total HTTP requests by route and status class.\n";
  o += "# TYPE kvasir:http_requests_total counter\n";
  static const char* kClasses[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int r = 0; r < kNumRoutes; ++r) {
    for (int c = 0; c < 5; ++c) {
      const int64_t v = counts_[static_cast<size_t>(r)][static_cast<size_t>(c)].load(std::memory_order_relaxed);
      if (v == 0) continue;
      o += "kvasir:http_requests_total{model_name=\"" + model_name + "\",handler=\"" + kRouteNames[r] +
           "\",status=\"" + kClasses[c] + "\"} " + std::to_string(v) + "\n";
    }
  }
  if (ServingContext* ctx = ctx_.load()) {
    auto gauge = [&](const char* name, const char* help, const char* type, int64_t v) {
      o += std::string("# HELP kvasir:") + name + " " + help + "\n# TYPE kvasir:" + name + " " + type + "\n";
      o += std::string("kvasir:") + name + "{model_name=\"" + model_name + "\"} " + std::to_string(v) + "\n";
    };
    gauge("server_inflight_requests", "Generation requests the HTTP server is answering.", "gauge",
          static_cast<int64_t>(ctx->num_inflight()));
    gauge("server_waiting_sequences", "Admitted sequences without a first output yet.", "gauge", ctx->num_waiting());
    gauge("server_rejected_queue_full_total", "Requests refused with 429 (--max-num-queued-reqs).", "counter",
          ctx->num_rejected_queue_full.load());
    gauge("server_client_aborts_total", "Requests aborted because the client went away.", "counter",
          ctx->num_aborted_by_client.load());
    gauge("server_preparing_requests", "Requests queued or running on the handler pool (parse, template, tokenize).",
          "gauge", static_cast<int64_t>(pool_.num_tasks()));
    gauge("server_rejected_busy_total", "Requests refused with 429 because the handler pool was full.", "counter",
          num_rejected_busy_.load());
  }
  return o;
}

}  // namespace kvasir::server
