// How many of a request's speculative drafts are worth verifying this step (load-adaptive
// speculation). A draft at position i is emitted only if drafts 1..i are all accepted, which an
// ngram-style request does with probability about a^i (a: its per-draft acceptance rate, a running
// estimate). Verifying d drafts adds d query tokens (and logits rows) to the step. So the budget
// verifies the d whose expected emitted tokens, each worth what a token of the plain step at this
// batch size costs, beat most clearly what those d tokens add to the step's time; none if no d
// pays. Both come from one step-cost curve (step_cost), which is not convex on the CPU (a third
// token can cost less than the second), so every d is weighed, not just the next draft. The curve
// rises from a one-token step and turns linear once the matmuls are bound by arithmetic, where a
// token is worth exactly what it costs and only near-certain drafts would pay, so large batches
// verify none. Pure arithmetic on counts.
#pragma once

namespace kvasir {

// The step-cost curve, in units of a one-token step: a step of T tokens of one sequence that all
// need logits (a verify step; a plain decode batch of T sequences costs about the same), measured
// on the CPU backend with SmolLM2-135M Q4_1, one thread, as process CPU time per step of
// `kvasir bench latency --num-speculative-tokens-forced T-1` (BENCHMARKS.md, 2026-12-03: Xeon with
// AMX, batches of 2-31 rows on packed panels, the machine loaded by other jobs): 1.0, 1.19, 1.40,
// 1.48, 1.62, 1.84 for T = 1..6 (with the in-place tile for every batch it was 1.0, 1.24, 1.46,
// 1.71, 2.03, 2.34), then kTokenCost per further token (L2-hot matmuls: ~0.2; rounded up, so that
// large batches err toward verifying nothing). A curve measured by the running backend at start
// is not done.
inline constexpr double kStepCostByTokens[] = {1.0, 1.19, 1.40, 1.48, 1.62, 1.84};
inline constexpr double kTokenCost = 0.25;      // each token past the table
inline constexpr double kLogitsRowCost = 0.08;  // what a token's logits row adds (prefill rows have none)
double step_cost(int num_tokens, int num_logits_rows);

// Drafts to verify, at most num_available: request has acceptance estimate `acceptance_rate`;
// the step has `num_decodes` decoding requests (one logits row each) and already holds
// `num_step_tokens` tokens (this request's own decode token included).
int num_drafts_worth_verifying(int num_available, double acceptance_rate, int num_decodes, int num_step_tokens);

// The acceptance estimate after a verify step that accepted `num_accepted` of `num_verified`
// drafts. Each draft examined (the accepted ones, and the first rejected one) is one observation.
double updated_acceptance_rate(double rate, int num_verified, int num_accepted);

// A request that had drafts but verified none (its estimate said they were not worth it) drifts
// back toward the prior, so a request whose text turns repetitive later is tried again.
double relaxed_acceptance_rate(double rate);

}  // namespace kvasir
