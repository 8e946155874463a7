#include "sched/draft_budget.h"

#include <algorithm>

namespace kvasir {
namespace {

constexpr double kPriorAcceptance = 0.7;  // also Request's initial estimate
constexpr double kObservationWeight = 0.25;
constexpr double kRelaxWeight = 0.008;  // a hopeless request retries one draft every ~6-8 steps

}  // namespace

double marginal_draft_cost(int num_decodes) {
  const int b = std::max(1, num_decodes);
  const double t = static_cast<double>(b - 1) / static_cast<double>(kComputeBoundBatch - 1);
  return std::min(1.0, kDraftCostAtBatch1 + (1.0 - kDraftCostAtBatch1) * t);
}

int num_drafts_worth_verifying(int num_available, int max_drafts, double acceptance_rate, int num_decodes) {
  const int cap = std::min(num_available, max_drafts);
  const double cost = marginal_draft_cost(num_decodes);
  double chance = 1.0;
  int n = 0;
  while (n < cap) {
    chance *= acceptance_rate;
    if (chance <= cost) break;
    ++n;
  }
  return n;
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
