#include "engine/metrics.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

namespace kvasir {

Histogram::Histogram(std::vector<double> buckets) : buckets_(std::move(buckets)), counts_(buckets_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < buckets_.size() && v > buckets_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.buckets = buckets_;
  uint64_t acc = 0;
  for (uint64_t c : counts_) s.counts.push_back(acc += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

static std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
static std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

EngineMetrics::EngineMetrics()
    : time_to_first_token_s(latency_buckets()),
      inter_token_latency_s(latency_buckets()),
      e2e_request_latency_s(latency_buckets()),
      request_prompt_tokens(token_buckets()),
      request_generation_tokens(token_buckets()) {}

void EngineMetrics::set_spec_decode_accepted_per_pos(const std::vector<int64_t>& counts) {
  std::lock_guard<std::mutex> lock(spec_mu);
  spec_accepted_per_pos = counts;
}

std::vector<int64_t> EngineMetrics::spec_decode_accepted_per_pos() const {
  std::lock_guard<std::mutex> lock(spec_mu);
  return spec_accepted_per_pos;
}

double EngineMetrics::spec_decode_mean_acceptance_length() const {
  const int64_t drafts = spec_decode_num_drafts.load();
  return drafts == 0 ? 0.0 : 1.0 + static_cast<double>(spec_decode_num_accepted_tokens.load()) / static_cast<double>(drafts);
}

void EngineMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(finish_mu);
  ++request_success[reason];
}

static std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string EngineMetrics::render_prometheus(const std::string& model_name) const {
  const EngineMetrics* self = this;
  return render_prometheus_replicas(model_name, std::span<const EngineMetrics* const>(&self, 1));
}

namespace {

Histogram::Snapshot merged(const std::vector<Histogram::Snapshot>& parts) {
  Histogram::Snapshot total = parts.front();
  for (size_t p = 1; p < parts.size(); ++p) {
    for (size_t i = 0; i < total.counts.size(); ++i) total.counts[i] += parts[p].counts[i];
    total.sum += parts[p].sum;
    total.count += parts[p].count;
  }
  return total;
}

}  // namespace

std::string render_prometheus_replicas(const std::string& model_name, std::span<const EngineMetrics* const> engines) {
  std::ostringstream o;
  const std::string base = "model_name=\"" + model_name + "\"";
  // The labels of each series: the total first (no engine label: what one engine alone shows),
  // then, with several replicas, one series per replica labelled engine="i" as vLLM labels them.
  std::vector<std::string> labels = {base};
  if (engines.size() > 1) {
    for (size_t i = 0; i < engines.size(); ++i) labels.push_back(base + ",engine=\"" + std::to_string(i) + "\"");
  }
  // values[0] is the total, values[1 + i] replica i's.
  auto series = [&](const std::function<double(const EngineMetrics&)>& get, bool mean) {
    std::vector<double> v(1, 0.0);
    for (const EngineMetrics* e : engines) {
      const double x = get(*e);
      v[0] += x;
      if (engines.size() > 1) v.push_back(x);
    }
    if (mean && !engines.empty()) v[0] /= static_cast<double>(engines.size());
    return v;
  };
  auto emit = [&](const std::string& name, const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) o << "kvasir:" << name << "{" << labels[i] << "} " << fmt(v[i]) << "\n";
  };
  // A gauge's total is the sum, except a fraction (kv_cache_usage_perc), whose total is the mean.
  auto gauge = [&](const char* name, const char* help, const std::function<double(const EngineMetrics&)>& get,
                   bool mean = false) {
    o << "# HELP kvasir:" << name << " " << help << "\n# TYPE kvasir:" << name << " gauge\n";
    emit(name, series(get, mean));
  };
  auto counter = [&](const char* name, const char* help, const std::function<double(const EngineMetrics&)>& get) {
    o << "# HELP kvasir:" << name << "_total " << help << "\n# TYPE kvasir:" << name << "_total counter\n";
    emit(std::string(name) + "_total", series(get, false));
  };
  auto histogram = [&](const char* name, const char* help, Histogram EngineMetrics::*member) {
    std::vector<Histogram::Snapshot> per;
    for (const EngineMetrics* e : engines) per.push_back((e->*member).snapshot());
    std::vector<Histogram::Snapshot> shown = {merged(per)};
    if (engines.size() > 1) shown.insert(shown.end(), per.begin(), per.end());
    o << "# HELP kvasir:" << name << " " << help << "\n# TYPE kvasir:" << name << " histogram\n";
    for (size_t k = 0; k < shown.size(); ++k) {
      const Histogram::Snapshot& s = shown[k];
      const std::string& lbl = labels[k];
      for (size_t i = 0; i < s.buckets.size(); ++i) {
        o << "kvasir:" << name << "_bucket{" << lbl << ",le=\"" << fmt(s.buckets[i]) << "\"} " << s.counts[i] << "\n";
      }
      o << "kvasir:" << name << "_bucket{" << lbl << ",le=\"+Inf\"} " << s.counts.back() << "\n";
      o << "kvasir:" << name << "_sum{" << lbl << "} " << fmt(s.sum) << "\n";
      o << "kvasir:" << name << "_count{" << lbl << "} " << s.count << "\n";
    }
  };
  auto num = [](const std::atomic<int64_t>& a) { return static_cast<double>(a.load()); };
  gauge("num_requests_running", "Number of requests in model execution batches.",
        [&](const EngineMetrics& m) { return num(m.num_requests_running); });
  gauge("num_requests_waiting", "Number of requests waiting to be processed.",
        [&](const EngineMetrics& m) { return num(m.num_requests_waiting); });
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        [](const EngineMetrics& m) { return m.kv_cache_usage.load(); }, /*mean=*/true);
  counter("num_preemptions", "Cumulative number of preemptions from the engine.",
          [&](const EngineMetrics& m) { return num(m.num_preemptions); });
  counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
          [&](const EngineMetrics& m) { return num(m.prefix_cache_queries); });
  counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          [&](const EngineMetrics& m) { return num(m.prefix_cache_hits); });
  counter("prompt_tokens", "Number of prefill tokens processed.", [&](const EngineMetrics& m) { return num(m.prompt_tokens); });
  counter("generation_tokens", "Number of generation tokens processed.",
          [&](const EngineMetrics& m) { return num(m.generation_tokens); });
  o << "# HELP kvasir:request_success_total Count of successfully processed requests.\n"
    << "# TYPE kvasir:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    const std::vector<double> v = series(
        [reason](const EngineMetrics& m) {
          std::lock_guard<std::mutex> lock(m.finish_mu);
          auto it = m.request_success.find(reason);
          return static_cast<double>(it == m.request_success.end() ? 0 : it->second);
        },
        false);
    for (size_t i = 0; i < v.size(); ++i) {
      o << "kvasir:request_success_total{" << labels[i] << ",finished_reason=\"" << reason << "\"} " << fmt(v[i]) << "\n";
    }
  }
  counter("spec_decode_num_drafts", "Number of spec decoding drafts.", [&](const EngineMetrics& m) { return num(m.spec_decode_num_drafts); });
  counter("spec_decode_num_draft_tokens", "Number of draft tokens.",
          [&](const EngineMetrics& m) { return num(m.spec_decode_num_draft_tokens); });
  counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.",
          [&](const EngineMetrics& m) { return num(m.spec_decode_num_accepted_tokens); });
  {
    std::vector<std::vector<int64_t>> per;
    size_t positions = 0;
    for (const EngineMetrics* e : engines) {
      per.push_back(e->spec_decode_accepted_per_pos());
      positions = std::max(positions, per.back().size());
    }
    o << "# HELP kvasir:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft's position.\n"
      << "# TYPE kvasir:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t i = 0; i < positions; ++i) {
      std::vector<int64_t> v(1, 0);
      for (const auto& p : per) {
        const int64_t x = i < p.size() ? p[i] : 0;
        v[0] += x;
        if (engines.size() > 1) v.push_back(x);
      }
      for (size_t k = 0; k < v.size(); ++k) {
        o << "kvasir:spec_decode_num_accepted_tokens_per_pos_total{" << labels[k] << ",position=\"" << i << "\"} " << v[k] << "\n";
      }
    }
  }
  histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", &EngineMetrics::time_to_first_token_s);
  histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &EngineMetrics::inter_token_latency_s);
  histogram("e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", &EngineMetrics::e2e_request_latency_s);
  histogram("request_prompt_tokens", "Number of prefill tokens processed.", &EngineMetrics::request_prompt_tokens);
  histogram("request_generation_tokens", "Number of generation tokens processed.", &EngineMetrics::request_generation_tokens);
  return o.str();
}

}  // namespace kvasir
