#include "server/serving_app.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "setup/loaded_model.h"
#include "common/log.h"
#include "common/mapped_file.h"
#include "engine/engine_group.h"
#include "kvasir/llm.h"
#include "server/openai_protocol.h"
#include "server/routes.h"
#include "server/serving_chat_template.h"
#include "server/serving_context.h"

namespace kvasir::server {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// vLLM's --generation-config: "auto" takes the model's own sampling defaults (its
// generation_config.json, read once with the model), "vllm" ignores them, a folder names another
// generation_config.json.
Status apply_generation_config(const std::string& mode, const LoadedModel& model, ServingOptions* opts) {
  if (mode == "vllm") return Status();
  GenerationDefaults defaults = model.generation_defaults;
  std::string path = model.path + "/generation_config.json";
  if (mode != "auto") {
    if (!is_dir(mode)) return invalid_argument("--generation-config must be auto, vllm or a folder, got '" + mode + "'");
    path = mode + "/generation_config.json";
    KVASIR_ASSIGN_OR_RETURN(std::optional<Json> gen, read_generation_config(mode));
    if (!gen) return not_found(path + " not found");
    KVASIR_ASSIGN_OR_RETURN(defaults, generation_defaults_from_json(*gen, path));
  }
  defaults.apply_to(&opts->default_params);
  opts->default_max_tokens = defaults.max_new_tokens;
  if (!defaults.empty()) {
    KVASIR_LOG_INFO("default sampling parameters from %s: %s", path.c_str(), defaults.to_json().dump().c_str());
  }
  return Status();
}

// What the transport answers on its own (before routing) also carries OpenAI's error envelope,
// so clients parse every 4xx/5xx the same way.
http::Response transport_error_page(int status, std::string_view detail) {
  const char* message = "The request was refused.";
  const char* code = "bad_request";
  switch (status) {
    case 400: message = "Malformed HTTP request."; break;
    case 408: message = "The request did not arrive in time (read timeout)."; code = "request_timeout"; break;
    case 413: message = "The request body is too large (--max-body-bytes)."; code = "payload_too_large"; break;
    case 414: message = "The request URI is too long."; code = "uri_too_long"; break;
    case 431: message = "The request headers are too large (--max-header-bytes)."; code = "headers_too_large"; break;
    case 501: message = "Unsupported transfer coding."; code = "not_implemented"; break;
    case 505:
      message = "HTTP version not supported (HTTP/1.0 and 1.1 only).";
      code = "http_version_not_supported";
      break;
    case 503: message = "Too many connections; retry later."; code = "service_unavailable"; break;
    case 500: message = "internal server error"; code = "internal_error"; break;
    default: break;
  }
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  std::string text = message;
  if (!detail.empty()) text += " (" + std::string(detail) + ")";
  http::Response r = error_response({status, text, type, "", code});
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace

ServingApp::ServingApp(ServeConfig cfg) : cfg_(std::move(cfg)) {
  RouterOptions ro;
  ro.api_key = cfg_.api_key;
  // Preparing a request is CPU work (JSON, templates, tokenizer, grammars) of at most one body
  // each; enough threads to keep prompts from queueing behind one big one, and room for three
  // maximal bodies at once before clients get 429.
  ro.handler_pool.num_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 8);
  ro.handler_pool.max_bytes = 3 * std::max<size_t>(cfg_.http.max_body_bytes, size_t{1} << 20);
  router_ = std::make_unique<Router>(ro);
}

ServingApp::~ServingApp() { shutdown(0); }

Status ServingApp::start_http() {
  Router* router = router_.get();
  if (!cfg_.http.error_page) cfg_.http.error_page = transport_error_page;
  http_ = std::make_unique<http::HttpServer>(
      cfg_.http, [router](http::Request req, std::shared_ptr<http::Reply> reply) { router->handle(std::move(req), std::move(reply)); });
  return http_->start();
}

int ServingApp::port() const { return http_ ? http_->port() : 0; }

std::string ServingApp::engine_fault() {
  if (!llm_ || !llm_->engines().dead()) return "";
  const std::string why = llm_->engines().fault();
  return why.empty() ? "the engine failed" : why;
}

bool ServingApp::lost_remote_replica() const { return llm_ && llm_->lost_remote_replica(); }

Status ServingApp::load() {
  if (cfg_.engine.model.empty()) cfg_.engine.model = default_model_path();
  KVASIR_ASSIGN_OR_RETURN(llm_, LLM::create(cfg_.engine));
  const LoadedModel& m = llm_->model();

  ServingOptions so;
  so.served_model_names = cfg_.served_model_names;
  if (so.served_model_names.empty()) so.served_model_names.push_back(cfg_.engine.model);
  so.model_root = cfg_.engine.model;
  so.trust_request_chat_template = cfg_.trust_request_chat_template;
  so.max_num_queued_reqs = cfg_.max_num_queued_reqs;
  KVASIR_RETURN_IF_ERROR(check_output_parser_config(cfg_.output_parsers));
  so.output_parsers = cfg_.output_parsers;
  so.exclude_tools_when_tool_choice_none = cfg_.exclude_tools_when_tool_choice_none;
  so.max_stored_responses = static_cast<size_t>(std::max<int64_t>(0, cfg_.max_stored_responses));
  so.num_pump_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 8, 1, 4);
  KVASIR_RETURN_IF_ERROR(apply_generation_config(cfg_.generation_config, m, &so));

  std::optional<ChatTemplate> tmpl;
  std::string tmpl_error;
  auto text = resolve_chat_template_text(cfg_.chat_template, *m.tokenizer);
  if (!text.ok()) {
    if (!cfg_.chat_template.empty()) return text.status();  // an explicit flag must work
    tmpl_error = text.status().message();
  } else {
    auto parsed = ChatTemplate::parse(*text);
    if (!parsed.ok()) {
      if (!cfg_.chat_template.empty()) return invalid_argument("--chat-template: " + parsed.status().message());
      tmpl_error = "the model's chat template does not parse: " + parsed.status().message();
    } else {
      tmpl = std::move(*parsed);
    }
  }
  if (!tmpl) KVASIR_LOG_WARN("chat completions disabled: %s", tmpl_error.c_str());

  ctx_ = std::make_unique<ServingContext>(llm_->engines(), *m.tokenizer, static_cast<int32_t>(m.config.vocab_size),
                                          llm_->max_model_len(), std::move(tmpl), tmpl_error, std::move(so));
  router_->set_context(ctx_.get());
  KVASIR_LOG_INFO("serving model '%s' (max_model_len %d, %d KV blocks%s)", ctx_->model_name().c_str(),
                  llm_->max_model_len(), llm_->num_kv_blocks(),
                  llm_->engines().size() > 1
                      ? (" in each of " + std::to_string(llm_->engines().size()) + " data-parallel replicas").c_str()
                      : "");
  return Status();
}

void ServingApp::shutdown(double timeout_s, const std::function<bool()>& interrupted) {
  if (shut_down_) return;
  shut_down_ = true;
  using Clock = std::chrono::steady_clock;
  router_->begin_shutdown();
  if (http_) http_->stop_accepting();
  // Requests still being prepared launch (or get 503) before the drain counts the jobs.
  router_->stop_handlers();
  if (ctx_) {
    ctx_->begin_shutdown();
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::max(0.0, timeout_s)));
    // The last job to finish wakes the drain at once; the 20 ms slices only look for a second
    // Ctrl-C.
    while (!ctx_->wait_idle_until(std::min(deadline, Clock::now() + std::chrono::milliseconds(20))) &&
           Clock::now() < deadline && !(interrupted && interrupted())) {
    }
    if (ctx_->num_inflight() > 0) {
      KVASIR_LOG_INFO("aborting %zu in-flight requests", ctx_->num_inflight());
      ctx_->abort_all();
      // The aborts reach every job within an engine step; give them a moment to tell clients.
      ctx_->wait_idle_until(Clock::now() + std::chrono::seconds(5));
    }
  }
  if (http_) http_->stop();
  if (ctx_) ctx_->stop_pump();
  if (llm_) llm_->engines().shutdown();
  router_->set_context(nullptr);
  ctx_.reset();
  llm_.reset();
  http_.reset();
}

}  // namespace kvasir::server
