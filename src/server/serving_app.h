// ServingApp: `kvasir serve` minus the command line: listens first (so /health answers 503 while
// the model loads), loads the model and engine the way kvasir::LLM does, serves the OpenAI API,
// and shuts down gracefully: stop accepting, 503 for new requests, drain in-flight requests up to
// a deadline, abort the rest (clients get a finish or an SSE error), stop. Must not parse flags
// or install signal handlers (tools/cmd_serve.cpp does).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "setup/engine_args.h"
#include "common/status.h"
#include "server/chat_output_parser.h"
#include "server/http_server.h"

namespace kvasir {
class LLM;
}

namespace kvasir::server {

class Router;
class ServingContext;

struct ServeConfig {
  EngineArgs engine;
  http::ServerOptions http;
  std::string api_key;                          // empty: no authentication
  std::vector<std::string> served_model_names;  // empty: the model path as given
  std::string chat_template;                    // file or literal; empty: the model's own
  std::string generation_config = "auto";       // auto | vllm | a folder with generation_config.json
  bool trust_request_chat_template = false;
  int64_t max_num_queued_reqs = 8192;
  OutputParserConfig output_parsers;  // --enable-auto-tool-choice, --tool-call-parser, --reasoning-parser
  bool exclude_tools_when_tool_choice_none = false;
  int64_t max_stored_responses = 1000;  // /v1/responses kept for previous_response_id (LRU)
};

class ServingApp {
 public:
  explicit ServingApp(ServeConfig cfg);
  ~ServingApp();

  Status start_http();
  Status load();
  int port() const;
  // The engine failed (a step's error; /health answers 503) and why; "" while it runs.
  std::string engine_fault();
  // A data-parallel replica on another node lost its link (its node died): LLM::lost_remote_replica.
  bool lost_remote_replica() const;
  // Returns once every client was answered (or aborted) and the engine stopped.
  // `interrupted` is polled while draining: true cuts the drain short (a second Ctrl-C).
  void shutdown(double timeout_s, const std::function<bool()>& interrupted = {});

 private:
  ServeConfig cfg_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<LLM> llm_;
  std::unique_ptr<ServingContext> ctx_;
  bool shut_down_ = false;
};

}  // namespace kvasir::server
