#include "sample/rejection_sampler.h"

#include <algorithm>

#include "common/check.h"

namespace kvasir {

void append_verify_rows(const DraftVerifyRequest& req, std::vector<SamplingRequestState>* rows) {
  const size_t k = static_cast<size_t>(req.num_drafts);
  KVASIR_CHECK(req.state.output_token_ids.size() >= k);
  const size_t num_output = req.state.output_token_ids.size() - k;
  for (size_t j = 0; j <= k; ++j) {
    SamplingRequestState s = req.state;
    s.output_token_ids = req.state.output_token_ids.first(num_output + j);
    s.num_generated_tokens = req.state.num_generated_tokens + static_cast<int>(j);
    rows->push_back(s);
  }
}

int num_emitted_tokens(std::span<const int32_t> drafts, std::span<const int32_t> target_samples) {
  KVASIR_CHECK(target_samples.size() == drafts.size() + 1);
  size_t n = 0;
  while (n < drafts.size() && drafts[n] == target_samples[n]) ++n;
  return static_cast<int>(n) + 1;
}

namespace {

// Inverse CDF over weights w (need not sum to 1) in ascending id order; the last positive weight
// when rounding leaves u * total past the running sum.
int32_t draw(std::span<const double> w, double total, double u) {
  const double target = u * total;
  double acc = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0) continue;
    acc += w[i];
    last = static_cast<int32_t>(i);
    if (acc > target) return last;
  }
  return last;
}

}  // namespace

int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, double u_accept,
                         double u_residual, bool* accepted) {
  KVASIR_CHECK(p.size() == q.size() && draft >= 0 && static_cast<size_t>(draft) < p.size());
  const double pd = p[static_cast<size_t>(draft)], qd = q[static_cast<size_t>(draft)];
  KVASIR_CHECK_MSG(qd > 0.0, "a draft token its own distribution gives no mass");
  // u < p/q accepts with probability min(1, p/q); written without the division.
  if (u_accept * qd < pd) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  std::vector<double> residual(p.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    residual[i] = std::max(0.0, static_cast<double>(p[i]) - static_cast<double>(q[i]));
    total += residual[i];
  }
  if (total <= 0.0) {
    for (size_t i = 0; i < p.size(); ++i) total += residual[i] = p[i];
  }
  return draw(residual, total, u_residual);
}

}  // namespace kvasir
