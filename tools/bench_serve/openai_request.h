// One streamed OpenAI request as the benchmark sends it: the JSON body for
// /v1/completions or /v1/chat/completions, and the timed exchange (connect,
// send, read SSE chunks) that fills a RequestResult. Blocking; the caller runs
// one per worker thread. Must not schedule requests or aggregate results
// (cmd_bench_serve.cpp and bench_metrics.h do).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bench_serve/bench_metrics.h"
#include "bench_serve/http_client.h"
#include "common/json.h"

namespace kvasir::bench {

struct BenchRequest {
  std::string prompt;
  int64_t prompt_len = 0; // tokens (exact with a tokenizer, else an estimate)
  int64_t output_len = 0; // max_tokens to ask for
};

struct RequestConfig {
  BaseUrl url;
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  bool ignore_eos = false;
  std::optional<double> temperature;
  double timeout_s = 6 * 3600;      // aiohttp's default in vLLM's client
  Json extra_body = Json::object(); // merged into every request body last
  bool chat() const { return endpoint.find("chat") != std::string::npos; }
};

std::string build_request_body(const RequestConfig &cfg,
                               const BenchRequest &req);

// Where a stream stands between chunks.
struct StreamState {
  Clock::time_point start;
  Clock::time_point last_chunk;
  bool first_chunk_seen = false;
  bool done = false; // [DONE] arrived
  int64_t num_content_chunks = 0;
};

// Applies one SSE `data` payload received at `now`: a content chunk sets TTFT
// or adds an ITL gap; a usage object sets the token counts; an error object or
// bad JSON is an error.
Status apply_stream_data(std::string_view data, bool chat,
                         Clock::time_point now, StreamState *st,
                         RequestResult *r);

// Sends `req` and reads its stream to the end. Never throws; failures land in
// r.error.
RequestResult run_request(const RequestConfig &cfg, const BenchRequest &req);

} // namespace kvasir::bench
