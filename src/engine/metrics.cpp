#include "engine/metrics.h"

#include <cstdio>
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
  std::ostringstream o;
  const std::string lbl = "model_name=\"" + model_name + "\"";
  auto gauge = [&](const char* name, const char* help, double v) {
    o << "# HELP kvasir:" << name << " " << help << "\n# TYPE kvasir:" << name << " gauge\n";
    o << "kvasir:" << name << "{" << lbl << "} " << fmt(v) << "\n";
  };
  auto counter = [&](const char* name, const char* help, double v) {
    o << "# HELP kvasir:" << name << "_total " << help << "\n# TYPE kvasir:" << name << "_total counter\n";
    o << "kvasir:" << name << "_total{" << lbl << "} " << fmt(v) << "\n";
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    Histogram::Snapshot s = h.snapshot();
    o << "# HELP kvasir:" << name << " " << help << "\n# TYPE kvasir:" << name << " histogram\n";
    for (size_t i = 0; i < s.buckets.size(); ++i) {
      o << "kvasir:" << name << "_bucket{" << lbl << ",le=\"" << fmt(s.buckets[i]) << "\"} " << s.counts[i] << "\n";
    }
    o << "kvasir:" << name << "_bucket{" << lbl << ",le=\"+Inf\"} " << s.counts.back() << "\n";
    o << "kvasir:" << name << "_sum{" << lbl << "} " << fmt(s.sum) << "\n";
    o << "kvasir:" << name << "_count{" << lbl << "} " << s.count << "\n";
  };
  gauge("num_requests_running", "Number of requests in model execution batches.", static_cast<double>(num_requests_running.load()));
  gauge("num_requests_waiting", "Number of requests waiting to be processed.", static_cast<double>(num_requests_waiting.load()));
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_cache_usage.load());
  counter("num_preemptions", "Cumulative number of preemptions from the engine.", static_cast<double>(num_preemptions.load()));
  counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", static_cast<double>(prefix_cache_queries.load()));
  counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", static_cast<double>(prefix_cache_hits.load()));
  counter("prompt_tokens", "Number of prefill tokens processed.", static_cast<double>(prompt_tokens.load()));
  counter("generation_tokens", "Number of generation tokens processed.", static_cast<double>(generation_tokens.load()));
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(finish_mu));
    o << "# HELP kvasir:request_success_total Count of successfully processed requests.\n"
      << "# TYPE kvasir:request_success_total counter\n";
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      auto it = request_success.find(reason);
      o << "kvasir:request_success_total{" << lbl << ",finished_reason=\"" << reason << "\"} "
        << (it == request_success.end() ? 0 : it->second) << "\n";
    }
  }
  counter("spec_decode_num_drafts", "Number of spec decoding drafts.", static_cast<double>(spec_decode_num_drafts.load()));
  counter("spec_decode_num_draft_tokens", "Number of draft tokens.", static_cast<double>(spec_decode_num_draft_tokens.load()));
  counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", static_cast<double>(spec_decode_num_accepted_tokens.load()));
  {
    const std::vector<int64_t> per_pos = spec_decode_accepted_per_pos();
    o << "# HELP kvasir:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft's position.\n"
      << "# TYPE kvasir:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t i = 0; i < per_pos.size(); ++i) {
      o << "kvasir:spec_decode_num_accepted_tokens_per_pos_total{" << lbl << ",position=\"" << i << "\"} " << per_pos[i] << "\n";
    }
  }
  histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", time_to_first_token_s);
  histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", inter_token_latency_s);
  histogram("e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2e_request_latency_s);
  histogram("request_prompt_tokens", "Number of prefill tokens processed.", request_prompt_tokens);
  histogram("request_generation_tokens", "Number of generation tokens processed.", request_generation_tokens);
  return o.str();
}

}  // namespace kvasir
