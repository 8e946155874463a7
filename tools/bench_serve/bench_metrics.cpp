#include "bench_serve/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kvasir::bench {

StatusOr<GoodputSlo> parse_goodput(const std::vector<std::string> &items) {
  GoodputSlo slo;
  for (std::string item : items) {
    std::replace(item.begin(), item.end(), ',', ' ');
    std::istringstream in(item);
    std::string kv;
    while (in >> kv) {
      const size_t colon = kv.find(':');
      if (colon == std::string::npos)
        return invalid_argument("goodput item '" + kv + "' is not NAME:MS");
      const std::string name = kv.substr(0, colon),
                        value = kv.substr(colon + 1);
      char *end = nullptr;
      const double ms = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(ms >= 0) || !std::isfinite(ms)) {
        return invalid_argument("goodput value '" + value +
                                "' must be a non-negative number of ms");
      }
      if (name == "ttft") {
        slo.ttft_ms = ms;
      } else if (name == "tpot") {
        slo.tpot_ms = ms;
      } else if (name == "e2el") {
        slo.e2el_ms = ms;
      } else {
        return invalid_argument("goodput metric '" + name +
                                "' is not one of ttft, tpot, e2el");
      }
    }
  }
  return slo;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 *
                      static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] +
         (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Distribution summarize(const std::vector<double> &values,
                       const std::vector<double> &ps) {
  Distribution d;
  d.percentiles.assign(ps.size(), 0.0);
  if (values.empty())
    return d;
  double sum = 0;
  for (double v : values)
    sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values)
    sq += (v - d.mean) * (v - d.mean);
  d.std =
      std::sqrt(sq / static_cast<double>(
                         values.size())); // population std, as numpy's default
  d.median = percentile(values, 50);
  for (size_t i = 0; i < ps.size(); ++i)
    d.percentiles[i] = percentile(values, ps[i]);
  return d;
}

std::optional<double> tpot_s(const RequestResult &r) {
  if (r.output_tokens <= 1)
    return std::nullopt;
  return (r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

BenchSummary compute_summary(const std::vector<RequestResult> &results,
                             double duration_s, const GoodputSlo &slo,
                             const std::vector<double> &ps) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestResult &r : results) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_len;
    s.total_output += r.output_tokens;
    if (r.expected_output_len > 0 && r.output_tokens != r.expected_output_len)
      ++s.num_output_len_mismatch;
    const std::optional<double> t = tpot_s(r);
    ttft.push_back(r.ttft_s * 1e3);
    if (t)
      tpot.push_back(*t * 1e3);
    for (double x : r.itl_s)
      itl.push_back(x * 1e3);
    e2el.push_back(r.latency_s * 1e3);
    const bool good = (!slo.ttft_ms || r.ttft_s * 1e3 <= *slo.ttft_ms) &&
                      (!slo.tpot_ms || t.value_or(0) * 1e3 <= *slo.tpot_ms) &&
                      (!slo.e2el_ms || r.latency_s * 1e3 <= *slo.e2el_ms);
    if (good)
      ++s.good_completed;
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.request_goodput =
        slo.any() ? static_cast<double>(s.good_completed) / duration_s : 0;
    s.output_throughput = static_cast<double>(s.total_output) / duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input + s.total_output) / duration_s;
  }
  s.ttft_ms = summarize(ttft, ps);
  s.tpot_ms = summarize(tpot, ps);
  s.itl_ms = summarize(itl, ps);
  s.e2el_ms = summarize(e2el, ps);
  return s;
}

std::string percentile_word(double p) {
  if (p == std::floor(p))
    return std::to_string(static_cast<int64_t>(p));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return buf;
}

} // namespace kvasir::bench
