// Serving-benchmark metrics as `vllm bench serve` defines them: per request
// TTFT, TPOT (decode time over output tokens after the first), ITL (gaps
// between streamed chunks) and E2EL; over the run throughput, goodput against
// SLOs, and mean/median/std/percentiles with numpy's default (linear)
// interpolation. Pure arithmetic: must not do I/O or know how results were
// measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvasir::bench {

// What one request measured (times in seconds from sending its first byte).
struct RequestResult {
  bool success = false;
  std::string error;
  int64_t prompt_len =
      0; // server's prompt_tokens when reported, else the dataset's count
  int64_t expected_output_len = 0; // max_tokens sent
  int64_t output_tokens =
      0; // server's completion_tokens when reported, else streamed chunks
  bool output_tokens_from_usage = false;
  double ttft_s = 0;
  double latency_s = 0; // until the last content chunk
  std::vector<double> itl_s;
  std::string generated_text;
};

// Service-level objectives in ms; a request is "good" when it meets every one
// that is set.
struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};
// Items like "ttft:500" "tpot:50" (one or more per string, separated by spaces
// or commas).
StatusOr<GoodputSlo> parse_goodput(const std::vector<std::string> &items);

// The p-th percentile (0..100) of `values`, interpolating linearly between
// closest ranks as numpy.percentile does; 0 for an empty list.
double percentile(std::vector<double> values, double p);

struct Distribution {
  double mean = 0, median = 0, std = 0;
  std::vector<double> percentiles; // one per requested p, same order
};
Distribution summarize(const std::vector<double> &values,
                       const std::vector<double> &ps);

// Per-request TPOT in seconds; nullopt unless more than one token came back.
std::optional<double> tpot_s(const RequestResult &r);

struct BenchSummary {
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  int64_t good_completed = 0;
  int64_t num_output_len_mismatch =
      0; // completed requests whose output count != max_tokens
  double duration_s = 0;
  double request_throughput = 0, request_goodput = 0, output_throughput = 0,
         total_token_throughput = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
};
BenchSummary compute_summary(const std::vector<RequestResult> &results,
                             double duration_s, const GoodputSlo &slo,
                             const std::vector<double> &ps);

// "99" for 99, "99.9" for 99.9 (the JSON key spelling vLLM uses: p99_ttft_ms,
// p99.9_ttft_ms).
std::string percentile_word(double p);

} // namespace kvasir::bench
