#include "sample/token_select.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "common/check.h"

namespace kvasir {
namespace {

// 12 bits of the order key: sign, 8 exponent bits, 3 mantissa bits.
constexpr int kLogitBucketShift = 20;
// For e in (0, 1]: 8 exponent bits and 4 mantissa bits of the plain float bits (<= 0x3F8 << 3).
constexpr int kProbBucketShift = 19;
// Below this many entries selecting or sorting them outright beats a histogram pass.
constexpr size_t kSmallSort = 2048;

}  // namespace

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > best_v) {  // strict: the first of equal values wins
      best_v = x[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

float kth_largest(std::span<const float> x, int64_t k, SamplerWorkspace* ws) {
  KVASIR_CHECK(k >= 1 && static_cast<size_t>(k) <= x.size());
  auto desc = [](float a, float b) { return float_order_key(a) > float_order_key(b); };
  float* s = ws->scratch.data();
  if (x.size() <= kSmallSort) {  // a histogram pass would cost more than the row
    std::copy(x.begin(), x.end(), s);
    std::nth_element(s, s + (k - 1), s + x.size(), desc);
    return s[k - 1];
  }
  auto& count = ws->hist_count;
  count.fill(0);
  for (float v : x) ++count[float_order_key(v) >> kLogitBucketShift];
  // Find the bucket holding the k-th largest: everything in higher buckets is larger.
  int bucket = kNumSelectBuckets - 1;
  int64_t above = 0;
  for (; bucket > 0; --bucket) {
    if (above + count[bucket] >= k) break;
    above += count[bucket];
  }
  size_t m = 0;
  for (float v : x) {
    if (static_cast<int>(float_order_key(v) >> kLogitBucketShift) == bucket) s[m++] = v;
  }
  const size_t r = static_cast<size_t>(k - above);  // 1-based rank inside the bucket
  KVASIR_CHECK(r >= 1 && r <= m);
  std::nth_element(s, s + (r - 1), s + m, desc);
  return s[r - 1];
}

double fill_probs(std::span<const float> x, float x_max, float temperature, float min_e,
                  std::span<float> e, bool for_top_p, SamplerWorkspace* ws) {
  KVASIR_CHECK(x.size() == e.size());
  double mass = 0.0;
  if (for_top_p && e.size() > kSmallSort) {
    auto& hist = ws->hist_mass;
    hist.fill(0.0);
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = std::exp((x[i] - x_max) / temperature);
      e[i] = v;
      if (v >= min_e && v > 0.0f) {
        mass += v;
        hist[std::bit_cast<uint32_t>(v) >> kProbBucketShift] += v;
      }
    }
    return mass;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = std::exp((x[i] - x_max) / temperature);
    e[i] = v;
    if (v >= min_e && v > 0.0f) mass += v;
  }
  return mass;
}

TopPCut top_p_cutoff(std::span<const float> e, float min_e, double mass, float top_p,
                     SamplerWorkspace* ws) {
  auto kept = [min_e](float v) { return v >= min_e && v > 0.0f; };
  const double target = static_cast<double>(top_p) * mass;
  const TopPCut keep_all{min_e, mass};
  float* s = ws->scratch.data();
  size_t m = 0;
  double above = 0.0;  // mass of the entries larger than every member of s
  if (e.size() <= kSmallSort) {
    for (float v : e) {
      if (kept(v)) s[m++] = v;
    }
  } else {
    // fill_probs left the mass per bucket: walk buckets from the top, and only the bucket where
    // the sum crosses the target needs its members sorted.
    const auto& hist = ws->hist_mass;
    int bucket = kNumSelectBuckets - 1;
    for (; bucket >= 0; --bucket) {
      if (above + hist[bucket] >= target) break;
      above += hist[bucket];
    }
    if (bucket < 0) return keep_all;
    for (float v : e) {
      if (kept(v) && static_cast<int>(std::bit_cast<uint32_t>(v) >> kProbBucketShift) == bucket) {
        s[m++] = v;
      }
    }
  }
  std::sort(s, s + m, std::greater<float>());
  double acc = above;
  for (size_t i = 0; i < m; ++i) {
    acc += s[i];
    if (acc < target) continue;
    for (size_t j = i + 1; j < m && s[j] == s[i]; ++j) acc += s[j];  // ties stay
    return {s[i], acc};
  }
  return keep_all;
}

int32_t draw_token(std::span<const int32_t> ids, std::span<const float> e, float cut,
                   double kept_mass, double u) {
  KVASIR_CHECK(ids.empty() || ids.size() == e.size());
  const double target = u * kept_mass;
  double acc = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < e.size(); ++i) {
    if (!(e[i] >= cut && e[i] > 0.0f)) continue;
    acc += e[i];
    last = ids.empty() ? static_cast<int32_t>(i) : ids[i];
    if (acc > target) return last;
  }
  return last;
}

}  // namespace kvasir
