#include "sched/draft_budget.h"

#include <algorithm>

namespace kvasir {
namespace {

constexpr double kPriorAcceptance = 0.7;  // also Request's initial estimate
constexpr double kObservationWeight = 0.25;
constexpr double kRelaxWeight = 0.008;  // a hopeless request retries one draft every ~6-8 steps

}  // namespace

double step_cost(int num_tokens, int num_logits_rows) {
  return 1.0 + kTokenCost * std::max(0, num_tokens - kFreeTokens) + kLogitsRowCost * std::max(0, num_logits_rows - 1);
}

int num_drafts_worth_verifying(int num_available, double acceptance_rate, int num_decodes, int num_step_tokens) {
  const int b = std::max(1, num_decodes);
  // What one emitted token is worth: the time per token of the plain step at this batch size.
  const double token_value = step_cost(b, b) / b;
  double chance = 1.0;
  int tokens = std::max(1, num_step_tokens), rows = b, n = 0;
  while (n < num_available) {
    chance *= acceptance_rate;
    const double added = step_cost(tokens + 1, rows + 1) - step_cost(tokens, rows);
    if (chance * token_value <= added) break;
    ++n, ++tokens, ++rows;
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
