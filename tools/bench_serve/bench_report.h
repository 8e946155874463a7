// The benchmark's report: the summary table `vllm bench serve` prints, and its
// JSON result file (same key names: completed, request_throughput,
// mean_ttft_ms, p99_itl_ms, ...). Must not measure or compute metrics
// (bench_metrics.h does).
#pragma once

#include <string>
#include <vector>

#include "bench_serve/bench_metrics.h"
#include "common/json.h"

namespace kvasir::bench {

struct ReportOptions {
  std::vector<std::string> metrics = {"ttft", "tpot", "itl",
                                      "e2el"}; // --percentile-metrics
  std::vector<double> percentiles = {90, 99};  // --metric-percentiles
  int64_t max_concurrency = 0;                 // 0: unlimited
  bool goodput = false;
  bool check_output_len =
      false; // --ignore-eos: output counts should equal max_tokens
};

std::string format_report(const BenchSummary &s, const ReportOptions &opts);
// The summary's fields plus the chosen distributions; `detailed` adds
// per-request lists.
Json report_json(const BenchSummary &s, const ReportOptions &opts,
                 const std::vector<RequestResult> &results, bool detailed);

} // namespace kvasir::bench
