#include "sample/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "sample/sampler_workspace.h"
#include "sample/token_select.h"

namespace kvasir {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log(sum(exp(x))) with the max subtracted first; exp in float, the sum in double.
double log_sum_exp(std::span<const float> x) {
  float x_max = kNegInf;
  for (float v : x) x_max = std::max(x_max, v);
  // Every entry -inf: no token is possible, so every logprob is -inf (x - (+inf)).
  if (x_max == kNegInf) return std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (float v : x) sum += std::exp(v - x_max);
  return static_cast<double>(x_max) + std::log(sum);
}

float to_logprob(float x, double lse) { return static_cast<float>(static_cast<double>(x) - lse); }

}  // namespace

void LogprobsTensors::resize(int rows, int max_num_logprobs) {
  KVASIR_CHECK(rows >= 0);
  num_rows = rows;
  num_columns = max_num_logprobs >= 0 ? max_num_logprobs + 1 : 0;
  const size_t cells = static_cast<size_t>(rows) * static_cast<size_t>(num_columns);
  token_ids.assign(cells, kNoToken);
  logprobs.assign(cells, kNegInf);
  ranks.assign(static_cast<size_t>(rows), 0);
  num_logprobs.assign(static_cast<size_t>(rows), -1);
}

void compute_row_logprobs(std::span<const float> x, int32_t token_id, int num_logprobs, int row,
                          SamplerWorkspace* ws, LogprobsTensors* out) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  const int n = static_cast<int>(std::min<int64_t>(std::max(num_logprobs, 0), vocab));
  KVASIR_CHECK(row >= 0 && row < out->num_rows);
  KVASIR_CHECK_MSG(n + 1 <= out->num_columns, "LogprobsTensors sized for fewer logprobs");
  KVASIR_CHECK(token_id >= 0 && token_id < vocab);

  const double lse = log_sum_exp(x);
  const float x_token = x[static_cast<size_t>(token_id)];
  int32_t rank = 0;  // vLLM counts x >= x_token, the token itself included
  for (float v : x) rank += v >= x_token ? 1 : 0;

  const size_t base = static_cast<size_t>(row) * static_cast<size_t>(out->num_columns);
  out->token_ids[base] = token_id;
  out->logprobs[base] = to_logprob(x_token, lse);
  out->ranks[static_cast<size_t>(row)] = rank;
  out->num_logprobs[static_cast<size_t>(row)] = n;
  if (n == 0) return;

  // Candidates are the values >= the n-th largest (ties may add more); order them by value
  // descending then id ascending and keep n.
  const float threshold = kth_largest(x, n, ws);
  const uint32_t threshold_key = float_order_key(threshold);
  auto& pairs = ws->pairs;
  pairs.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    if (float_order_key(x[static_cast<size_t>(i)]) >= threshold_key) {
      pairs.emplace_back(x[static_cast<size_t>(i)], static_cast<int32_t>(i));
    }
  }
  KVASIR_CHECK(pairs.size() >= static_cast<size_t>(n));
  auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    const uint32_t ka = float_order_key(a.first), kb = float_order_key(b.first);
    return ka != kb ? ka > kb : a.second < b.second;
  };
  std::partial_sort(pairs.begin(), pairs.begin() + n, pairs.end(), before);
  for (int j = 0; j < n; ++j) {
    out->token_ids[base + 1 + static_cast<size_t>(j)] = pairs[static_cast<size_t>(j)].second;
    out->logprobs[base + 1 + static_cast<size_t>(j)] =
        to_logprob(pairs[static_cast<size_t>(j)].first, lse);
  }
}

}  // namespace kvasir
