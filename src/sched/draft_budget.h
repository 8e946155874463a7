// How many of a request's speculative drafts are worth verifying this step (load-adaptive
// speculation). A draft at position i is emitted only if drafts 1..i are all accepted, which an
// ngram-style request does with probability about a^i (a: its per-draft acceptance rate, a running
// estimate). Verifying it adds one query token (and one logits row) to the step. So draft i is
// verified while a^i times what one emitted token is worth at this batch size exceeds what that
// extra token adds to the step's time. Both come from one step-cost curve (step_cost): nearly
// flat for the first tokens (the weights are read once for all of them), then linear once the
// matmuls are bound by arithmetic, where a token is worth exactly what it costs and only near-
// certain drafts would pay, so large batches verify none. Pure arithmetic on counts.
#pragma once

namespace kvasir {

// The step-cost curve, in units of a one-token step, measured with `kvasir bench latency`
// (prefill of T tokens, one sequence) on the CPU backend with SmolLM2-135M Q4_1: 1.0, 1.1, 1.35,
// 1.7, 2.1, 2.4 for T = 1..6 (its matmul kernel takes activation rows in pairs), and about
// kLogitsRowCost more per extra logits row (a verify step needs one per position).
inline constexpr int kFreeTokens = 2;             // tokens a step holds at the price of one
inline constexpr double kTokenCost = 0.35;        // each token past those
inline constexpr double kLogitsRowCost = 0.08;    // each logits row past the first
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
