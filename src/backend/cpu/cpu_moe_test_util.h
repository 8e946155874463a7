// What the CPU MoE tests share: a float64 reference routing (sort-based: ties to the lower expert
// and group), running the backend's moe_route into host vectors, and a CpuBackend of a given
// thread count and precision. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace kvasir::cpu::testing {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Indices of v sorted by value descending, ties by index ascending.
inline std::vector<int> ranked(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  return idx;
}

inline Routed reference_route(const std::vector<float>& logits, int64_t t_n, int64_t e_n, const MoeRouting& r,
                       const std::vector<float>& bias) {
  Routed out;
  for (int64_t t = 0; t < t_n; ++t) {
    std::vector<double> scores(e_n), choice(e_n);
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < e_n; ++e) mx = std::max(mx, static_cast<double>(logits[t * e_n + e]));
    for (int64_t e = 0; e < e_n; ++e) {
      const double l = logits[t * e_n + e];
      scores[e] = r.scoring == MoeScoring::kSoftmax ? std::exp(l - mx) : 1.0 / (1.0 + std::exp(-l));
      sum += scores[e];
    }
    for (int64_t e = 0; e < e_n; ++e) {
      if (r.scoring == MoeScoring::kSoftmax) scores[e] /= sum;
      choice[e] = scores[e] + (bias.empty() ? 0.0 : bias[e]);
    }
    if (r.num_groups > 1) {
      const int64_t gs = e_n / r.num_groups;
      std::vector<double> group_score(r.num_groups);
      for (int g = 0; g < r.num_groups; ++g) {
        std::vector<double> members(choice.begin() + g * gs, choice.begin() + (g + 1) * gs);
        std::sort(members.rbegin(), members.rend());
        group_score[g] = r.group_score == MoeGroupScore::kMax ? members[0] : members[0] + members[1];
      }
      const std::vector<int> groups = ranked(group_score);
      std::vector<bool> kept(r.num_groups, false);
      for (int i = 0; i < r.topk_groups; ++i) kept[groups[i]] = true;
      for (int64_t e = 0; e < e_n; ++e) {
        if (!kept[e / gs]) choice[e] = -1e300;
      }
    }
    const std::vector<int> order = ranked(choice);
    double chosen_sum = 0;
    for (int j = 0; j < r.top_k; ++j) chosen_sum += scores[order[j]];
    for (int j = 0; j < r.top_k; ++j) {
      out.ids.push_back(order[j]);
      double w = scores[order[j]];
      if (r.renormalize) w /= chosen_sum;
      out.weights.push_back(static_cast<float>(w * r.routed_scaling_factor));
    }
  }
  return out;
}

inline Routed run_route(CpuBackend& cpu, std::vector<float>& logits, int64_t t_n, int64_t e_n, const MoeRouting& r) {
  Routed out;
  out.ids.assign(static_cast<size_t>(t_n * r.top_k), -1);
  out.weights.assign(out.ids.size(), -1.0f);
  const Tensor lt = Tensor::make(logits.data(), DType::kF32, {t_n, e_n});
  Tensor ids = Tensor::make(out.ids.data(), DType::kI32, {t_n, r.top_k});
  Tensor w = Tensor::make(out.weights.data(), DType::kF32, {t_n, r.top_k});
  cpu.moe_route(lt, r, ids, w);
  return out;
}

inline CpuBackend make_cpu(int threads, MatmulPrecision p = MatmulPrecision::kExact) {
  CpuBackendOptions o;
  o.num_threads = threads;
  o.precision = p;
  return CpuBackend(o);
}

}  // namespace kvasir::cpu::testing
