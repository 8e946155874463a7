// How many of a request's speculative drafts are worth verifying this step (load-adaptive
// speculation). A draft at position i is emitted only if drafts 1..i are all accepted, which an
// ngram-style request does with probability about a^i (a: its per-draft acceptance rate, a running
// estimate). Verifying d drafts adds d query tokens (and logits rows) to the step. So the budget
// verifies the d whose expected emitted tokens, each worth what a token of the plain step at this
// batch size costs, beat most clearly what those d tokens add to the step's time; none if no d
// pays. Both come from one step-cost curve (step_cost_curve.h: learned from the running backend's
// own steps), which is not convex on the CPU (a third token can cost less than the second), so
// every d is weighed, not just the next draft. On the CPU the curve rises from a one-token step and
// turns linear once the matmuls are bound by arithmetic, where a token is worth exactly what it
// costs and only near-certain drafts would pay, so large batches verify none. Pure arithmetic on
// counts.
#pragma once

#include "sched/step_cost_curve.h"

namespace kvasir {

// Drafts to verify, at most num_available: request has acceptance estimate `acceptance_rate`;
// the step has `num_decodes` decoding requests (one logits row each) and already holds
// `num_step_tokens` tokens (this request's own decode token included).
// draft_cost: what making each draft costs, in units of one emitted token's worth (0 when the
// drafts exist already; SchedulerConfig::spec_draft_cost_ratio when deciding whether to make them).
int num_drafts_worth_verifying(const StepCostCurve& costs, int num_available, double acceptance_rate, int num_decodes,
                               int num_step_tokens, double draft_cost = 0);

// The acceptance estimate after a verify step that accepted `num_accepted` of `num_verified`
// drafts. Each draft examined (the accepted ones, and the first rejected one) is one observation.
double updated_acceptance_rate(double rate, int num_verified, int num_accepted);

// A request that had drafts but verified none (its estimate said they were not worth it) drifts
// back toward the prior, so a request whose text turns repetitive later is tried again.
double relaxed_acceptance_rate(double rate);

}  // namespace kvasir
