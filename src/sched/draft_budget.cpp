#include "sched/draft_budget.h"

#include <algorithm>

namespace kvasir {
namespace {

constexpr double kPriorAcceptance = 0.7;  // also Request's initial estimate
constexpr double kObservationWeight = 0.25;
constexpr double kRelaxWeight = 0.008;  // a hopeless request retries one draft every ~6-8 steps

}  // namespace

int num_drafts_worth_verifying(const StepCostCurve& costs, int num_available, double acceptance_rate, int num_decodes,
                               int num_step_tokens, double draft_cost) {
  const int b = std::max(1, num_decodes);
  // What one emitted token is worth: the time per token of the plain step at this batch size.
  const double token_value = costs.cost(b, b) / b;
  const int tokens = std::max(1, num_step_tokens);
  const double base = costs.cost(tokens, b);
  double chance = 1.0, expected_tokens = 0.0, best_gain = 0.0;
  int best = 0;
  for (int d = 1; d <= num_available; ++d) {
    chance *= acceptance_rate;
    expected_tokens += chance;
    const double gain = (expected_tokens - d * draft_cost) * token_value - (costs.cost(tokens + d, b + d) - base);
    if (gain > best_gain) best_gain = gain, best = d;
  }
  return best;
}

double updated_acceptance_rate(double rate, int num_verified, int num_accepted) {
  const int examined = num_accepted + (num_accepted < num_verified ? 1 : 0);
  for (int i = 0; i < examined; ++i) {
    const double hit = i < num_accepted ? 1.0 : 0.0;
    rate += kObservationWeight * (hit - rate);
  }
  return std::clamp(rate, 0.0, 1.0);
}

double relaxed_acceptance_rate(double rate) { return rate + kRelaxWeight * (kPriorAcceptance - rate); }

}  // namespace kvasir
