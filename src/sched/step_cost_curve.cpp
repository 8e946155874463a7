#include "sched/step_cost_curve.h"

#include <algorithm>

namespace kvasir {

double prior_step_cost(int num_tokens) {
  constexpr int kTable = static_cast<int>(sizeof(kPriorStepCostByTokens) / sizeof(kPriorStepCostByTokens[0]));
  const int t = std::max(1, num_tokens);
  return t <= kTable ? kPriorStepCostByTokens[t - 1] : kPriorStepCostByTokens[kTable - 1] + kPriorTokenCost * (t - kTable);
}

void StepCostCurve::observe(int num_tokens, double seconds) {
  if (num_tokens < 1 || num_tokens > kMaxTokens || !(seconds > 0.0)) return;
  Point& p = points_[static_cast<size_t>(num_tokens)];
  // The first observations average plainly, so one outlier does not stand for the point.
  const double w = p.count < kMinObservations ? 1.0 / static_cast<double>(p.count + 1) : kObservationWeight;
  p.seconds += w * (seconds - p.seconds);
  ++p.count;
}

bool StepCostCurve::learned(int num_tokens) const {
  return num_tokens >= 1 && num_tokens <= kMaxTokens && points_[1].count >= kMinObservations &&
         points_[static_cast<size_t>(num_tokens)].count >= kMinObservations;
}

double StepCostCurve::all_rows_cost(int num_tokens) const {
  const int t = std::max(1, num_tokens);
  if (learned(t)) return points_[static_cast<size_t>(t)].seconds / points_[1].seconds;
  // Past what is learned: the largest learned count below, plus the prior's rise from there.
  for (int below = std::min(t, kMaxTokens + 1) - 1; below >= 2; --below) {
    if (learned(below)) return all_rows_cost(below) + prior_step_cost(t) - prior_step_cost(below);
  }
  return prior_step_cost(t);
}

double StepCostCurve::cost(int num_tokens, int num_logits_rows) const {
  const int t = std::max(1, num_tokens);
  // The curve prices a logits row for every token; prefill tokens have none.
  return all_rows_cost(t) - kLogitsRowCost * std::max(0, t - std::max(1, num_logits_rows));
}

}  // namespace kvasir
