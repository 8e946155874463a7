// Metrics: the engine's counters, gauges and histograms, with vLLM's metric meanings under the
// `kvasir:` prefix, rendered in Prometheus text format for GET /metrics. Thread-safe: the engine
// thread sets gauges, the output thread counts tokens and latencies, HTTP threads read.
// Must not know about HTTP or requests beyond the numbers it is given.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace kvasir {

class Histogram {
 public:
  explicit Histogram(std::vector<double> buckets);
  void observe(double v);
  struct Snapshot {
    std::vector<double> buckets;
    std::vector<uint64_t> counts;  // cumulative, one per bucket, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> buckets_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative) + overflow
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  EngineMetrics();

  // Gauges, set each step by the engine thread.
  std::atomic<int64_t> num_requests_running{0};
  std::atomic<int64_t> num_requests_waiting{0};
  std::atomic<double> kv_cache_usage{0.0};
  // Counters.
  std::atomic<int64_t> num_preemptions{0};
  std::atomic<int64_t> prefix_cache_queries{0};
  std::atomic<int64_t> prefix_cache_hits{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> num_steps{0};
  // Speculative decoding (vLLM's spec_decode_* counters): verify steps of a request with drafts,
  // draft tokens verified, drafts accepted, and accepted per draft position (0 = first draft).
  std::atomic<int64_t> spec_decode_num_drafts{0};
  std::atomic<int64_t> spec_decode_num_draft_tokens{0};
  std::atomic<int64_t> spec_decode_num_accepted_tokens{0};
  void set_spec_decode_accepted_per_pos(const std::vector<int64_t>& counts);
  std::vector<int64_t> spec_decode_accepted_per_pos() const;
  // vLLM's mean acceptance length: tokens a verify step emits on average, 1 + accepted / drafts.
  double spec_decode_mean_acceptance_length() const;
  mutable std::mutex finish_mu;
  std::map<std::string, int64_t> request_success;  // finish reason -> count
  mutable std::mutex spec_mu;
  std::vector<int64_t> spec_accepted_per_pos;  // guarded by spec_mu

  Histogram time_to_first_token_s;
  Histogram inter_token_latency_s;
  Histogram e2e_request_latency_s;
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;

  void count_finished(const std::string& reason);
  // Prometheus text exposition; model_name labels every series as vLLM does.
  std::string render_prometheus(const std::string& model_name) const;
};

// Several data-parallel replicas' metrics as one exposition: every series once as the total over
// the replicas with no engine label (what one engine alone renders, so a DP=1 scrape and its
// readers are unchanged; gauges summed, kv_cache_usage_perc averaged, histograms merged), then,
// with more than one replica, once per replica labelled engine="i" (vLLM's label).
std::string render_prometheus_replicas(const std::string& model_name, std::span<const EngineMetrics* const> engines);

}  // namespace kvasir
