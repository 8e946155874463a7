// `kvasir bench serve`: a load generator for any OpenAI-compatible server,
// after `vllm bench serve`: prompts from a dataset, Poisson (or gamma,
// --burstiness) arrivals at --request-rate, at most --max-concurrency in
// flight, each request streamed over its own HTTP/1.1 connection by a worker
// thread; then TTFT/TPOT/ITL/E2EL, throughput and goodput. Native, no Python.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "args.h"
#include "bench_serve/bench_dataset.h"
#include "bench_serve/bench_report.h"
#include "bench_serve/openai_request.h"
#include "commands.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

using bench::BenchRequest;
using bench::Clock;
using bench::RequestResult;

// Without --max-concurrency every request may be in flight; threads are capped
// here.
constexpr int64_t kMaxWorkers = 1024;

const char *kUsage =
    "usage: kvasir bench serve [options]\n"
    "Load-tests an OpenAI-compatible server (kvasir serve, vLLM, llama-server) "
    "over HTTP/1.1.\n"
    "  --base-url URL            http://host:port[/prefix] (default "
    "http://HOST:PORT)\n"
    "  --host H / --port P       default 127.0.0.1 / 8000\n"
    "  --endpoint PATH           /v1/completions (default) or "
    "/v1/chat/completions\n"
    "  --model NAME              model name sent in requests\n"
    "  --api-key KEY             sent as a Bearer token (default "
    "$OPENAI_API_KEY)\n"
    "  --dataset-name random|prompts   (default random)\n"
    "  --dataset-path FILE       prompts: JSONL with prompt/text/turns, or "
    "plain lines\n"
    "  --random-input-len N      (default 1024)   --random-output-len N "
    "(default 128)\n"
    "  --random-range-ratio R    lengths uniform in [len*(1-R), len*(1+R)] "
    "(default 0)\n"
    "  --random-prefix-len N     shared prefix tokens before each random "
    "prompt (default 0)\n"
    "  --prompts-output-len N    max_tokens for the prompts dataset (default "
    "256)\n"
    "  --tokenizer PATH          GGUF or HF dir: exact random prompt lengths "
    "and input counts\n"
    "  --num-prompts N           (default 1000)\n"
    "  --request-rate R          requests/s, Poisson arrivals; inf (default) "
    "sends all at once\n"
    "  --burstiness B            gamma shape of arrival gaps (1 = Poisson)\n"
    "  --max-concurrency N       most requests in flight (default: unlimited, "
    "1024 threads)\n"
    "  --seed N                  (default 0)\n"
    "  --ignore-eos              send ignore_eos so every request makes "
    "max_tokens tokens\n"
    "  --temperature T           sent when given (else the server's default)\n"
    "  --extra-body JSON         object merged into every request body\n"
    "  --goodput ttft:MS tpot:MS e2el:MS   SLOs for request goodput\n"
    "  --percentile-metrics L    of ttft,tpot,itl,e2el (default all four)\n"
    "  --metric-percentiles L    e.g. 50,90,99 (default 90,99)\n"
    "  --num-warmups N           untimed requests first (default 0); "
    "--no-initial-test skips the\n"
    "                            single test request that checks the setup\n"
    "  --timeout S               per request, seconds (default 21600)\n"
    "  --output-json FILE        results as JSON; --save-detailed adds "
    "per-request lists\n"
    "  --save-result             results as JSON under vLLM's file name "
    "(BACKEND-RATEqps[-concurrencyN]-MODEL-DATE.json)\n"
    "  --result-dir DIR          where --save-result writes (created; default "
    ".)\n"
    "  --result-filename NAME    the file name --save-result uses instead\n"
    "  --label NAME              recorded in the JSON\n"
    "Exit status 1 when any request failed.\n";

std::vector<std::string> split_list(const std::string &s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty())
      out.push_back(item);
  }
  return out;
}

struct Plan {
  bench::RequestConfig cfg;
  std::vector<BenchRequest> requests;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1;
  int64_t max_concurrency = 0;
  uint64_t seed = 0;
};

// Arrival offsets in seconds from the start: gamma gaps of mean 1/rate
// (exponential when burstiness is 1), or all zero at an infinite rate.
std::vector<double> arrival_offsets(size_t n, double rate, double burstiness,
                                    uint64_t seed) {
  std::vector<double> at(n, 0.0);
  if (!std::isfinite(rate))
    return at;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    at[i] = t;
    t += gap(rng);
  }
  return at;
}

// Runs every request with at most `workers` in flight; returns the wall time
// from the first dispatch to the last completion.
double run_all(const Plan &p, std::vector<RequestResult> *results) {
  const size_t n = p.requests.size();
  results->assign(n, RequestResult{});
  const std::vector<double> at =
      arrival_offsets(n, p.request_rate, p.burstiness, p.seed);
  const int64_t workers = std::min<int64_t>(
      static_cast<int64_t>(n),
      p.max_concurrency > 0 ? p.max_concurrency : kMaxWorkers);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> ready;
  bool closed = false;
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        size_t i = 0;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return closed || !ready.empty(); });
          if (ready.empty())
            return;
          i = ready.front();
          ready.pop_front();
        }
        (*results)[i] = bench::run_request(p.cfg, p.requests[i]);
      }
    });
  }
  const auto start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(start +
                                  std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(at[i])));
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(i);
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  cv.notify_all();
  for (auto &t : pool)
    t.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Python's str(float) for the rates vLLM writes into file names: "inf", "20.0".
std::string python_float(double v) {
  if (!std::isfinite(v))
    return "inf";
  std::ostringstream o;
  o << v;
  std::string s = o.str();
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

// Where the JSON result goes: --output-json, else with --save-result vLLM's
// name (or --result-filename) under --result-dir; empty: nowhere.
std::string result_path(const Args &args, const std::string &backend,
                        double request_rate, int64_t max_concurrency,
                        const std::string &model, const std::string &date) {
  if (args.has("output-json"))
    return args.get("output-json");
  if (!args.get_bool("save-result", false))
    return "";
  std::string name = args.get("result-filename");
  if (name.empty()) {
    const std::string base_model = model.substr(model.find_last_of('/') + 1);
    name =
        backend + "-" + python_float(request_rate) + "qps" +
        (max_concurrency > 0 ? "-concurrency" + std::to_string(max_concurrency)
                             : "") +
        "-" + base_model + "-" + date + ".json";
  }
  const std::string dir = args.get("result-dir");
  return dir.empty() ? name : dir + "/" + name;
}

int fail(const std::string &message, int code = 2) {
  std::fprintf(stderr, "kvasir bench serve: %s\n", message.c_str());
  return code;
}

} // namespace

int cmd_bench_serve(int argc, char **argv) {
  auto args = Args::parse(
      argc, argv,
      {"base-url",
       "host",
       "port",
       "endpoint",
       "model",
       "api-key",
       "dataset-name",
       "dataset-path",
       "random-input-len",
       "random-output-len",
       "random-range-ratio",
       "random-prefix-len",
       "prompts-output-len",
       "tokenizer",
       "num-prompts",
       "request-rate",
       "burstiness",
       "max-concurrency",
       "seed",
       "temperature",
       "extra-body",
       "goodput",
       "percentile-metrics",
       "metric-percentiles",
       "num-warmups",
       "timeout",
       "output-json",
       "result-dir",
       "result-filename",
       "label"},
      {"ignore-eos", "save-detailed", "save-result", "initial-test", "help"});
  if (!args.ok()) {
    std::fprintf(stderr, "%s", kUsage);
    return fail(args.status().message());
  }
  if (args->get_bool("help", false)) {
    std::printf("%s", kUsage);
    return 0;
  }
  // --goodput takes several space-separated items (argparse nargs="+"): the
  // ones after the first arrive as positionals.
  std::vector<std::string> goodput_items = args->get_all("goodput");
  for (const std::string &pos : args->positionals()) {
    if (!args->has("goodput") || pos.find(':') == std::string::npos)
      return fail("unexpected argument '" + pos + "'");
    goodput_items.push_back(pos);
  }
  auto slo = bench::parse_goodput(goodput_items);
  if (!slo.ok())
    return fail(slo.status().message());

  Plan plan;
  bench::RequestConfig &cfg = plan.cfg;
  if (args->has("base-url")) {
    auto url = bench::parse_base_url(args->get("base-url"));
    if (!url.ok())
      return fail(url.status().message());
    cfg.url = *url;
  } else {
    cfg.url.host = args->get("host", "127.0.0.1");
    auto port = args->get_int("port", 8000);
    if (!port.ok() || *port < 1 || *port > 65535)
      return fail("--port must be in 1..65535");
    cfg.url.port = static_cast<int>(*port);
  }
  cfg.endpoint = args->get("endpoint", "/v1/completions");
  if (cfg.endpoint.empty() || cfg.endpoint[0] != '/')
    return fail("--endpoint must start with '/'");
  cfg.model = args->get("model");
  const char *env_key = std::getenv("OPENAI_API_KEY");
  cfg.api_key = args->get("api-key", env_key ? env_key : "");
  cfg.ignore_eos = args->get_bool("ignore-eos", false);
  if (args->has("temperature")) {
    auto t = args->get_double("temperature", 0);
    if (!t.ok())
      return fail(t.status().message());
    cfg.temperature = *t;
  }
  if (args->has("extra-body")) {
    auto eb = parse_json(args->get("extra-body"));
    if (!eb.ok() || !eb->is_object())
      return fail("--extra-body must be a JSON object");
    cfg.extra_body = *eb;
  }
  auto num = args->get_int("num-prompts", 1000),
       conc = args->get_int("max-concurrency", 0),
       seed = args->get_int("seed", 0), warm = args->get_int("num-warmups", 0);
  auto timeout = args->get_double("timeout", cfg.timeout_s),
       burst = args->get_double("burstiness", 1);
  if (!num.ok() || *num < 1)
    return fail("--num-prompts must be >= 1");
  if (!conc.ok() || *conc < 0)
    return fail("--max-concurrency must be >= 1");
  if (!seed.ok() || !warm.ok() || *warm < 0)
    return fail("bad --seed or --num-warmups");
  if (!timeout.ok() || *timeout <= 0)
    return fail("--timeout must be > 0");
  if (!burst.ok() || *burst <= 0)
    return fail("--burstiness must be > 0");
  cfg.timeout_s = *timeout;
  plan.max_concurrency = *conc;
  plan.seed = static_cast<uint64_t>(*seed);
  plan.burstiness = *burst;
  if (const std::string rate = args->get("request-rate", "inf");
      rate != "inf") {
    auto r = args->get_double("request-rate", 0);
    if (!r.ok() || *r <= 0)
      return fail("--request-rate must be > 0 or inf");
    plan.request_rate = *r;
  }
  bench::ReportOptions ro;
  if (args->has("percentile-metrics"))
    ro.metrics = split_list(args->get("percentile-metrics"));
  for (const std::string &m : ro.metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el")
      return fail("unknown percentile metric '" + m + "'");
  }
  if (args->has("metric-percentiles")) {
    ro.percentiles.clear();
    for (const std::string &s : split_list(args->get("metric-percentiles"))) {
      char *end = nullptr;
      const double p = std::strtod(s.c_str(), &end);
      if (*end != '\0' || !(p > 0 && p < 100))
        return fail("--metric-percentiles values must be in (0, 100)");
      ro.percentiles.push_back(p);
    }
  }
  ro.max_concurrency = plan.max_concurrency;
  ro.goodput = slo->any();
  ro.check_output_len = cfg.ignore_eos;

  std::unique_ptr<LoadedModel> tok_model;
  if (args->has("tokenizer")) {
    auto t = load_tokenizer_only(args->get("tokenizer"));
    if (!t.ok())
      return fail("--tokenizer: " + t.status().message(), 1);
    tok_model = std::move(*t);
  }
  const Tokenizer *tok = tok_model ? tok_model->tokenizer.get() : nullptr;
  const std::string dataset = args->get("dataset-name", "random");
  StatusOr<std::vector<BenchRequest>> reqs =
      invalid_argument("--dataset-name must be random or prompts");
  if (dataset == "random") {
    bench::RandomDatasetOptions ro_ds;
    auto in = args->get_int("random-input-len", 1024),
         out = args->get_int("random-output-len", 128),
         prefix = args->get_int("random-prefix-len", 0);
    auto ratio = args->get_double("random-range-ratio", 0);
    if (!in.ok() || !out.ok() || !prefix.ok() || !ratio.ok())
      return fail("bad --random-* value");
    ro_ds.input_len = *in;
    ro_ds.output_len = *out;
    ro_ds.prefix_len = *prefix;
    ro_ds.range_ratio = *ratio;
    reqs = bench::sample_random_requests(ro_ds, *num, plan.seed, tok);
  } else if (dataset == "prompts") {
    auto out = args->get_int("prompts-output-len", 256);
    if (!args->has("dataset-path"))
      return fail("--dataset-name prompts needs --dataset-path");
    if (!out.ok())
      return fail("bad --prompts-output-len");
    reqs = bench::load_prompt_requests(args->get("dataset-path"), *num, *out,
                                       plan.seed, tok);
  }
  if (!reqs.ok())
    return fail(reqs.status().message());
  plan.requests = std::move(*reqs);

  std::printf("Target: http://%s:%d%s%s  model '%s'\n", cfg.url.host.c_str(),
              cfg.url.port, cfg.url.path_prefix.c_str(), cfg.endpoint.c_str(),
              cfg.model.c_str());
  if (args->get_bool("initial-test", true)) {
    std::printf("Starting initial single prompt test run...\n");
    RequestResult r = bench::run_request(cfg, plan.requests[0]);
    if (!r.success)
      return fail("initial test run failed: " + r.error, 1);
    std::printf("Initial test run completed. Starting main benchmark run...\n");
  }
  for (int64_t i = 0; i < *warm; ++i)
    bench::run_request(
        cfg, plan.requests[static_cast<size_t>(i) % plan.requests.size()]);
  std::printf("Traffic request rate: %s\nBurstiness factor: %g\nMaximum "
              "request concurrency: %s\n",
              std::isfinite(plan.request_rate)
                  ? std::to_string(plan.request_rate).c_str()
                  : "inf",
              plan.burstiness,
              plan.max_concurrency > 0
                  ? std::to_string(plan.max_concurrency).c_str()
                  : "None");
  std::fflush(stdout);

  std::vector<RequestResult> results;
  const double duration = run_all(plan, &results);
  const bench::BenchSummary s =
      bench::compute_summary(results, duration, *slo, ro.percentiles);
  std::printf("%s", bench::format_report(s, ro).c_str());
  for (const RequestResult &r : results) {
    if (!r.success) {
      std::fprintf(stderr, "first failure: %s\n", r.error.c_str());
      break;
    }
  }
  if (s.num_output_len_mismatch > 0) {
    std::fprintf(stderr,
                 "warning: %lld requests did not produce max_tokens tokens "
                 "despite --ignore-eos\n",
                 static_cast<long long>(s.num_output_len_mismatch));
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string backend = cfg.chat() ? "openai-chat" : "openai";
  const std::string path = result_path(*args, backend, plan.request_rate,
                                       plan.max_concurrency, cfg.model, date);
  if (!path.empty()) {
    Json j = Json::object();
    j.set("date", date);
    j.set("backend", backend);
    j.set("label", args->get("label"));
    j.set("base_url", "http://" + cfg.url.host + ":" +
                          std::to_string(cfg.url.port) + cfg.url.path_prefix);
    j.set("endpoint", cfg.endpoint);
    j.set("model_id", cfg.model);
    j.set("tokenizer_id", args->get("tokenizer"));
    j.set("dataset_name", dataset);
    j.set("num_prompts", *num);
    j.set("request_rate", std::isfinite(plan.request_rate)
                              ? Json(plan.request_rate)
                              : Json("inf"));
    j.set("burstiness", plan.burstiness);
    j.set("max_concurrency",
          plan.max_concurrency > 0 ? Json(plan.max_concurrency) : Json());
    j.set("ignore_eos", cfg.ignore_eos);
    Json report = bench::report_json(s, ro, results,
                                     args->get_bool("save-detailed", false));
    for (auto &[k, v] : report.as_object())
      j.set(k, std::move(v));
    if (args->has("result-dir") && !args->has("output-json")) {
      std::error_code ec;
      std::filesystem::create_directories(args->get("result-dir"), ec);
      if (ec)
        return fail("cannot create --result-dir " + args->get("result-dir") +
                        ": " + ec.message(),
                    1);
    }
    std::ofstream out(path);
    out << j.dump(Json::DumpOptions{2, false, ",", ": ", false}) << "\n";
    if (!out)
      return fail("cannot write " + path, 1);
    std::printf("Results saved to %s\n", path.c_str());
  }
  return s.failed > 0 ? 1 : 0;
}

} // namespace kvasir
