// `kvasir serve [MODEL]`: the OpenAI-compatible HTTP server (vLLM's flag names). SIGTERM/SIGINT
// start a graceful shutdown: stop accepting, drain up to --shutdown-timeout, abort the rest, exit 0.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "args.h"
#include "commands.h"
#include "common/log.h"
#include "engine_flags.h"
#include "api/remote_replica.h"
#include "api/tensor_parallel_group.h"
#include "server/serving_app.h"

namespace kvasir {
namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: kvasir serve [MODEL] [options]\n"
               "  --host HOST                    bind address (default 127.0.0.1; vLLM's default is 0.0.0.0)\n"
               "  --port N                       (default 8000; 0 = any free port)\n"
               "  --api-key KEY                  require 'Authorization: Bearer KEY' on /v1 routes\n"
               "                                 (also $KVASIR_API_KEY)\n"
               "  --served-model-name NAME       name(s) clients use; repeat for aliases (default: MODEL)\n"
               "  --chat-template FILE|TEXT      override the model's chat template\n"
               "  --trust-request-chat-template  allow a per-request chat_template\n"
               "  --generation-config auto|vllm|DIR  sampling defaults from generation_config.json (default auto)\n"
               "  --max-num-queued-reqs N        at most N sequences (prompts x n) wait for a first token: 429 past\n"
               "                                 it, 400 for one request larger than N (default 8192)\n"
               "  --enable-auto-tool-choice      tool_choice \"auto\": parse tool calls out of the output\n"
               "  --tool-call-parser NAME        the model's tool-call format (hermes, llama3_json, mistral,\n"
               "                                 pythonic, deepseek_v3)\n"
               "  --reasoning-parser NAME        split reasoning into reasoning_content (deepseek_r1, qwen3)\n"
               "  --exclude-tools-when-tool-choice-none  do not render tools into the prompt for tool_choice \"none\"\n"
               "  --max-stored-responses N       /v1/responses kept for previous_response_id, LRU (default 1000; 0: none)\n"
               "  --shutdown-timeout S           seconds to drain on SIGTERM/SIGINT; 0 aborts at once (default 30)\n"
               "  --max-header-bytes N  --max-body-bytes N   HTTP limits (431 / 413)\n"
               "  --http-threads N               HTTP I/O threads (default 2)\n"
               "Engine options:\n%s",
               engine_flags_help().c_str());
}

StatusOr<server::ServeConfig> config_from(const Args& a) {
  server::ServeConfig c;
  KVASIR_ASSIGN_OR_RETURN(c.engine, engine_args_from(a));
  c.http.host = a.get("host", "127.0.0.1");
  KVASIR_ASSIGN_OR_RETURN(int64_t port, a.get_int("port", 8000));
  if (port < 0 || port > 65535) return invalid_argument("--port must be in [0, 65535]");
  c.http.port = static_cast<int>(port);
  KVASIR_ASSIGN_OR_RETURN(int64_t threads, a.get_int("http-threads", c.http.num_io_threads));
  if (threads < 1 || threads > 64) return invalid_argument("--http-threads must be in [1, 64]");
  c.http.num_io_threads = static_cast<int>(threads);
  KVASIR_ASSIGN_OR_RETURN(int64_t hdr, a.get_int("max-header-bytes", static_cast<int64_t>(c.http.max_header_bytes)));
  KVASIR_ASSIGN_OR_RETURN(int64_t body, a.get_int("max-body-bytes", static_cast<int64_t>(c.http.max_body_bytes)));
  if (hdr < 1024 || hdr > (1 << 24) || body < 1024 || body > (int64_t{1} << 32)) {
    return invalid_argument("--max-header-bytes / --max-body-bytes out of range");
  }
  c.http.max_header_bytes = static_cast<size_t>(hdr);
  c.http.max_body_bytes = static_cast<size_t>(body);
  c.api_key = a.get("api-key");
  if (c.api_key.empty()) {
    if (const char* k = std::getenv("KVASIR_API_KEY"); k && *k) c.api_key = k;
  }
  for (const std::string& n : a.get_all("served-model-name")) {
    if (n.empty()) return invalid_argument("--served-model-name must not be empty");
    c.served_model_names.push_back(n);
  }
  c.chat_template = a.get("chat-template");
  c.generation_config = a.get("generation-config", "auto");
  c.trust_request_chat_template = a.get_bool("trust-request-chat-template", false);
  KVASIR_ASSIGN_OR_RETURN(int64_t queued, a.get_int("max-num-queued-reqs", c.max_num_queued_reqs));
  if (queued < 1 || queued > (int64_t{1} << 30)) return invalid_argument("--max-num-queued-reqs must be in [1, 2^30]");
  c.max_num_queued_reqs = queued;
  c.output_parsers.enable_auto_tool_choice = a.get_bool("enable-auto-tool-choice", false);
  c.output_parsers.tool_call_parser = a.get("tool-call-parser");
  c.output_parsers.reasoning_parser = a.get("reasoning-parser");
  KVASIR_RETURN_IF_ERROR(server::check_output_parser_config(c.output_parsers));
  c.exclude_tools_when_tool_choice_none = a.get_bool("exclude-tools-when-tool-choice-none", false);
  KVASIR_ASSIGN_OR_RETURN(int64_t stored, a.get_int("max-stored-responses", c.max_stored_responses));
  if (stored < 0 || stored > (int64_t{1} << 24)) return invalid_argument("--max-stored-responses must be in [0, 2^24]");
  c.max_stored_responses = stored;
  return c;
}

// A signal that arrived since the last call (signals are blocked and collected synchronously).
// How long a server whose tensor-parallel group broke keeps answering 503 before it exits.
constexpr int kBrokenGroupGraceMs = 1500;

bool take_signal(const sigset_t& set, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::set<std::string> value_flags = {"host",           "port",          "api-key",           "served-model-name",
                                       "chat-template",  "generation-config", "max-num-queued-reqs", "shutdown-timeout",
                                       "max-header-bytes", "max-body-bytes", "http-threads",
                                       "tool-call-parser", "reasoning-parser", "max-stored-responses"};
  std::set<std::string> bool_flags = {"trust-request-chat-template", "enable-auto-tool-choice",
                                      "exclude-tools-when-tool-choice-none", "help"};
  add_engine_flags(value_flags, bool_flags);
  auto args = Args::parse(argc, argv, value_flags, bool_flags);
  if (!args.ok() || args->get_bool("help", false)) {
    if (!args.ok()) std::fprintf(stderr, "kvasir serve: %s\n", args.status().message().c_str());
    print_usage();
    return args.ok() ? 0 : 2;
  }
  auto cfg = config_from(*args);
  auto timeout = args->get_double("shutdown-timeout", 30.0);
  if (!cfg.ok() || !timeout.ok() || !(*timeout >= 0 && *timeout <= 86400)) {
    std::fprintf(stderr, "kvasir serve: %s\n",
                 !cfg.ok() ? cfg.status().message().c_str()
                           : !timeout.ok() ? timeout.status().message().c_str() : "--shutdown-timeout must be in [0, 86400]");
    return 2;
  }

  // A --headless node of data-parallel replicas: no HTTP, only its replicas' steps.
  if (cfg->engine.launch.headless && cfg->engine.data_parallel_size > 1) return run_headless_replicas(cfg->engine);
  // A tensor-parallel worker (started by its node's launcher, a --headless node's rank, an mpirun
  // rank past 0): no HTTP, only steps.
  auto plan = plan_launch(cfg->engine);
  if (!plan.ok()) {
    std::fprintf(stderr, "kvasir serve: %s\n", plan.status().message().c_str());
    return 2;
  }
  if (plan->is_worker()) return run_tensor_parallel_worker(cfg->engine, *plan);

  // Block the shutdown signals in every thread (threads inherit the mask) and take them here.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The model runs (partly or wholly) in worker processes: a group that lost one cannot step again.
  const bool tensor_parallel = cfg->engine.parallel_layout().world_size() > 1;  // tensor or pipeline
  // Data-parallel replicas on other nodes: a node that died cannot step again either.
  const bool remote_replicas = cfg->engine.data_parallel.spans_nodes(cfg->engine.data_parallel_size);
  const bool worker_processes =
      tensor_parallel || remote_replicas || cfg->engine.distributed_executor_backend == "mp";
  server::ServingApp app(std::move(*cfg));
  if (Status st = app.start_http(); !st.ok()) {
    std::fprintf(stderr, "kvasir serve: %s\n", st.message().c_str());
    return 1;
  }
  KVASIR_LOG_INFO("loading the model; /health answers 503 until it is ready");
  if (Status st = app.load(); !st.ok()) {
    std::fprintf(stderr, "kvasir serve: %s\n", st.message().c_str());
    app.shutdown(0);
    return 1;
  }
  const std::string host = args->get("host", "127.0.0.1");
  const bool v6 = host.find(':') != std::string::npos;
  KVASIR_LOG_INFO("Kvasir OpenAI-compatible server ready at http://%s%s%s:%d (Ctrl-C to stop)", v6 ? "[" : "", host.c_str(),
                  v6 ? "]" : "", app.port());
  while (!take_signal(set, worker_processes ? 100 : 1000)) {
    // A tensor-parallel group that lost a rank cannot step again (its workers are gone): the live
    // requests already got their error and /health its 503; give clients a moment to see that,
    // then stop every process and exit non-zero, as vLLM does when its engine dies.
    if (!worker_processes) continue;
    std::string fault = app.engine_fault();
    // An idle replica's node that died is seen by the keep-alive (every 5 s), before any step.
    if (fault.empty() && remote_replicas && app.lost_remote_replica())
      fault = "a data-parallel replica's node was lost while idle";
    if (!fault.empty()) {
      // A replica's failed step with every node still there leaves the server answering 503, as
      // data parallelism on one host does; a node gone cannot step again.
      if (remote_replicas && !app.lost_remote_replica()) continue;
      KVASIR_LOG_ERROR("%s failed (%s); exiting",
                       tensor_parallel    ? "tensor-parallel group"
                       : remote_replicas ? "data-parallel group (a replica on another node)"
                                          : "model worker process",
                       fault.c_str());
      take_signal(set, kBrokenGroupGraceMs);
      app.shutdown(0);
      return 1;
    }
  }
  KVASIR_LOG_INFO("shutting down: draining in-flight requests for up to %.1f s", *timeout);
  app.shutdown(*timeout, [&set] { return take_signal(set, 0); });
  KVASIR_LOG_INFO("shutdown complete");
  return 0;
}

}  // namespace kvasir
