// StepCostCurve: what a step of T tokens costs, in units of a one-token step, for the draft budget
// (draft_budget.h). Learned from the steps the engine runs: each pure decode / verify step (every
// token has a logits row) reports its wall time, kept per token count as a running average, so the
// curve is the running backend's own (a CPU with or without AMX, a GPU whose verify steps cost
// little more than a decode step) and follows the context lengths of the requests being served.
// Until a token count and the one-token step have both been seen kMinObservations times, the
// prior (a curve measured on one CPU, below) stands in. Plain numbers only: never a tensor.
#pragma once

#include <array>
#include <cstdint>

namespace kvasir {

// The prior, in units of a one-token step: a step of T tokens of one sequence that all need
// logits (a verify step; a plain decode batch of T sequences costs about the same), measured on
// the CPU backend with SmolLM2-135M Q4_1, one thread, as process CPU time per step of
// `kvasir bench latency --num-speculative-tokens-forced T-1` (BENCHMARKS.md, 2026-12-03: Xeon with
// AMX, batches of 2-31 rows on packed panels, the machine loaded by other jobs): 1.0, 1.19, 1.40,
// 1.48, 1.62, 1.84 for T = 1..6, then kPriorTokenCost per further token (L2-hot matmuls: ~0.2;
// rounded up, so that large batches err toward verifying nothing).
inline constexpr double kPriorStepCostByTokens[] = {1.0, 1.19, 1.40, 1.48, 1.62, 1.84};
inline constexpr double kPriorTokenCost = 0.25;  // each token past the table
inline constexpr double kLogitsRowCost = 0.08;   // what a token's logits row adds (prefill rows have none)
double prior_step_cost(int num_tokens);

class StepCostCurve {
 public:
  // Token counts tracked one by one; larger steps use the prior's slope from the last learned one.
  static constexpr int kMaxTokens = 96;
  static constexpr int kMinObservations = 4;
  // Weight of a new observation in its token count's running average.
  static constexpr double kObservationWeight = 0.1;

  // A step of num_tokens tokens, each with a logits row, took `seconds`.
  void observe(int num_tokens, double seconds);
  // A step of num_tokens tokens of which num_logits_rows have logits rows (the rest: prefill).
  double cost(int num_tokens, int num_logits_rows) const;
  // Whether num_tokens's cost is learned (else the prior's).
  bool learned(int num_tokens) const;

 private:
  struct Point {
    double seconds = 0.0;
    int64_t count = 0;
  };
  double all_rows_cost(int num_tokens) const;
  std::array<Point, kMaxTokens + 1> points_{};
};

}  // namespace kvasir
