// StepCostCurve: the prior until a step size and the one-token step are both observed enough; then
// the measured ratio; past the learned sizes the prior's rise from the largest learned one; prefill
// tokens priced without their logits row. The draft budget follows what is learned: a backend
// whose verify steps cost almost nothing more (a GPU) verifies drafts at a batch size where the
// prior verifies none.
#include "sched/step_cost_curve.h"

#include <gtest/gtest.h>

#include "sched/draft_budget.h"

namespace kvasir {
namespace {

TEST(StepCostCurve, ThePriorStandsUntilAPointIsObservedEnough) {
  StepCostCurve c;
  EXPECT_DOUBLE_EQ(c.cost(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(c.cost(3, 3), kPriorStepCostByTokens[2]);
  EXPECT_DOUBLE_EQ(c.cost(10, 10), prior_step_cost(10));
  for (int i = 0; i < StepCostCurve::kMinObservations; ++i) c.observe(1, 0.010);
  for (int i = 0; i < StepCostCurve::kMinObservations - 1; ++i) c.observe(3, 0.011);
  EXPECT_FALSE(c.learned(3));
  EXPECT_DOUBLE_EQ(c.cost(3, 3), kPriorStepCostByTokens[2]);
  c.observe(3, 0.011);
  EXPECT_TRUE(c.learned(3));
  EXPECT_NEAR(c.cost(3, 3), 1.1, 1e-9);
  // Past the learned sizes: the prior's rise from 3 tokens.
  EXPECT_NEAR(c.cost(5, 5), 1.1 + prior_step_cost(5) - prior_step_cost(3), 1e-9);
  // Two of five tokens are prefill: no logits rows for them.
  EXPECT_NEAR(c.cost(5, 3), c.cost(5, 5) - 2 * kLogitsRowCost, 1e-9);
  // Bad observations change nothing.
  c.observe(0, 1.0);
  c.observe(StepCostCurve::kMaxTokens + 1, 1.0);
  c.observe(3, -1.0);
  EXPECT_NEAR(c.cost(3, 3), 1.1, 1e-9);
}

TEST(StepCostCurve, LaterObservationsMoveThePointGradually) {
  StepCostCurve c;
  for (int i = 0; i < StepCostCurve::kMinObservations; ++i) c.observe(1, 0.010), c.observe(2, 0.012);
  EXPECT_NEAR(c.cost(2, 2), 1.2, 1e-9);
  c.observe(2, 0.022);  // one slow step (a hiccup of the host) moves it by a tenth
  EXPECT_NEAR(c.cost(2, 2), 1.3, 1e-9);
}

TEST(StepCostCurve, TheDraftBudgetVerifiesWhereTheLearnedCurveIsFlat) {
  const StepCostCurve prior;
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.8, 16, 16), 0);
  StepCostCurve flat;  // a GPU: 16 to 80 tokens cost about what 16 do
  for (int i = 0; i < StepCostCurve::kMinObservations; ++i) {
    flat.observe(1, 0.0042);
    for (int t = 16; t <= 80; ++t) flat.observe(t, 0.0045 + 0.00001 * (t - 16));
  }
  EXPECT_EQ(num_drafts_worth_verifying(flat, 4, 0.8, 16, 16), 4);
  // A dear curve (each token as much as a step) verifies nothing even at batch 1.
  StepCostCurve dear;
  for (int i = 0; i < StepCostCurve::kMinObservations; ++i) {
    for (int t = 1; t <= 5; ++t) dear.observe(t, 0.01 * t);
  }
  EXPECT_EQ(num_drafts_worth_verifying(dear, 4, 0.9, 1, 1), 0);
}

}  // namespace
}  // namespace kvasir
