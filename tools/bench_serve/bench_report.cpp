#include "bench_serve/bench_report.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>

namespace kvasir::bench {
namespace {

void appendf(std::string *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void appendf(std::string *out, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  *out += buf;
}

// A title centred in a rule of `fill`, 50 columns wide.
std::string rule(const std::string &title, char fill) {
  const size_t width = 50,
               pad = title.size() >= width ? 0 : width - title.size();
  return std::string(pad / 2, fill) + title + std::string(pad - pad / 2, fill) +
         "\n";
}

struct MetricInfo {
  const char *key;
  const char *header;
  const char *upper;
  const Distribution BenchSummary::*dist;
};
constexpr MetricInfo kMetrics[] = {
    {"ttft", "Time to First Token", "TTFT", &BenchSummary::ttft_ms},
    {"tpot", "Time per Output Token (excl. 1st token)", "TPOT",
     &BenchSummary::tpot_ms},
    {"itl", "Inter-token Latency", "ITL", &BenchSummary::itl_ms},
    {"e2el", "End-to-end Latency", "E2EL", &BenchSummary::e2el_ms},
};

bool selected(const ReportOptions &o, const char *key) {
  return std::find(o.metrics.begin(), o.metrics.end(), key) != o.metrics.end();
}

} // namespace

std::string format_report(const BenchSummary &s, const ReportOptions &o) {
  std::string out = rule(" Serving Benchmark Result ", '=');
  auto row_i = [&](const char *name, int64_t v) {
    appendf(&out, "%-40s %-10lld\n", name, static_cast<long long>(v));
  };
  auto row_f = [&](const char *name, double v) {
    appendf(&out, "%-40s %-10.2f\n", name, v);
  };
  row_i("Successful requests:", s.completed);
  row_i("Failed requests:", s.failed);
  if (o.max_concurrency > 0)
    row_i("Maximum request concurrency:", o.max_concurrency);
  row_f("Benchmark duration (s):", s.duration_s);
  row_i("Total input tokens:", s.total_input);
  row_i("Total generated tokens:", s.total_output);
  if (o.check_output_len)
    row_i("Output length mismatches:", s.num_output_len_mismatch);
  row_f("Request throughput (req/s):", s.request_throughput);
  if (o.goodput)
    row_f("Request goodput (req/s):", s.request_goodput);
  row_f("Output token throughput (tok/s):", s.output_throughput);
  row_f("Total Token throughput (tok/s):", s.total_token_throughput);
  for (const MetricInfo &m : kMetrics) {
    if (!selected(o, m.key))
      continue;
    const Distribution &d = s.*(m.dist);
    out += rule(m.header, '-');
    appendf(&out, "%-40s %-10.2f\n",
            ("Mean " + std::string(m.upper) + " (ms):").c_str(), d.mean);
    appendf(&out, "%-40s %-10.2f\n",
            ("Median " + std::string(m.upper) + " (ms):").c_str(), d.median);
    for (size_t i = 0; i < o.percentiles.size(); ++i) {
      const std::string name =
          "P" + percentile_word(o.percentiles[i]) + " " + m.upper + " (ms):";
      appendf(&out, "%-40s %-10.2f\n", name.c_str(), d.percentiles[i]);
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

Json report_json(const BenchSummary &s, const ReportOptions &o,
                 const std::vector<RequestResult> &results, bool detailed) {
  Json j = Json::object();
  j.set("duration", s.duration_s);
  j.set("completed", s.completed);
  j.set("failed", s.failed);
  j.set("total_input_tokens", s.total_input);
  j.set("total_output_tokens", s.total_output);
  j.set("num_output_len_mismatch", s.num_output_len_mismatch);
  j.set("request_throughput", s.request_throughput);
  j.set("request_goodput", o.goodput ? Json(s.request_goodput) : Json());
  j.set("output_throughput", s.output_throughput);
  j.set("total_token_throughput", s.total_token_throughput);
  for (const MetricInfo &m : kMetrics) {
    if (!selected(o, m.key))
      continue;
    const Distribution &d = s.*(m.dist);
    const std::string k = m.key;
    j.set("mean_" + k + "_ms", d.mean);
    j.set("median_" + k + "_ms", d.median);
    j.set("std_" + k + "_ms", d.std);
    for (size_t i = 0; i < o.percentiles.size(); ++i)
      j.set("p" + percentile_word(o.percentiles[i]) + "_" + k + "_ms",
            d.percentiles[i]);
  }
  if (detailed) {
    Json in = Json::array(), out = Json::array(), ttfts = Json::array(),
         itls = Json::array(), errors = Json::array(), texts = Json::array();
    for (const RequestResult &r : results) {
      in.push_back(r.prompt_len);
      out.push_back(r.output_tokens);
      ttfts.push_back(r.ttft_s);
      Json itl = Json::array();
      for (double x : r.itl_s)
        itl.push_back(x);
      itls.push_back(std::move(itl));
      errors.push_back(r.error);
      texts.push_back(r.generated_text);
    }
    j.set("input_lens", std::move(in));
    j.set("output_lens", std::move(out));
    j.set("ttfts", std::move(ttfts));
    j.set("itls", std::move(itls));
    j.set("generated_texts", std::move(texts));
    j.set("errors", std::move(errors));
  }
  return j;
}

} // namespace kvasir::bench
