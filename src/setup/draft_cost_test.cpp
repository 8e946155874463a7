// draft_cost_ratio on the committed configs: a Llama-3.2-1B draft for Llama-3.1-8B reads about a
// sixth of the 8B's weights per pass, the dummy EAGLE-3 head (one layer, a 32k draft vocabulary)
// about 6%, the EAGLE-1 head (one layer and the target's 128k lm_head) more; host proposers and
// unreadable configs cost 0.
#include "setup/draft_cost.h"

#include <gtest/gtest.h>

#include "sched/draft_budget.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

const std::string kConfigs = std::string(KVASIR_SOURCE_DIR) + "/configs/";

ModelConfig target_config() {
  LoadOptions lo;
  lo.load_format = "dummy";
  auto m = load_model_without_weights(kConfigs + "llama-3.1-8b.json", lo);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? (*m)->config : ModelConfig{};
}

EngineArgs args_for(const std::string& method, const std::string& model) {
  EngineArgs a;
  a.load_format = "dummy";
  a.speculative.method = method;
  a.speculative.draft_model = model.empty() ? "" : kConfigs + model;
  a.speculative.num_speculative_tokens = 3;
  return a;
}

TEST(DraftCost, RatiosOfTheCommittedConfigs) {
  const ModelConfig target = target_config();
  ASSERT_GT(target.hidden_size, 0);
  const double dm = draft_cost_ratio(args_for("draft_model", "llama-3.2-1b.json"), target);
  const double e3 = draft_cost_ratio(args_for("eagle3", "eagle3-llama-3.1-8b.json"), target);
  const double e1 = draft_cost_ratio(args_for("eagle", "eagle-llama-3-8b.json"), target);
  std::printf("draft_model 1B %.3f, eagle3 %.3f, eagle %.3f\n", dm, e3, e1);
  EXPECT_GT(dm, 0.12);
  EXPECT_LT(dm, 0.2);
  EXPECT_GT(e3, 0.03);
  EXPECT_LT(e3, 0.08);
  EXPECT_GT(e1, e3);
  EXPECT_LT(e1, 0.15);
  EXPECT_DOUBLE_EQ(draft_cost_ratio(args_for("draft_model", "llama-3.1-8b.json"), target), 1.0);
  EXPECT_EQ(draft_cost_ratio(args_for("ngram", ""), target), 0.0);
  EXPECT_EQ(draft_cost_ratio(args_for("draft_model", "no-such.json"), target), 0.0);
}

// A costly draft is proposed only at a higher acceptance than a free one.
TEST(DraftCost, TheBudgetWeighsTheDraftsCost) {
  const StepCostCurve prior;
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.3, 1, 1, 0.0), 1);
  EXPECT_EQ(num_drafts_worth_verifying(prior, 4, 0.3, 1, 1, 0.16), 0);
  EXPECT_GT(num_drafts_worth_verifying(prior, 4, 0.9, 1, 1, 0.16), 0);
}

}  // namespace
}  // namespace kvasir
