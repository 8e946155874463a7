// How many of a request's speculative drafts are worth verifying this step (load-adaptive
// speculation). A draft at position i is emitted only if drafts 1..i are all accepted, which an
// ngram-style request does with probability about a^i (a: its per-draft acceptance rate, a running
// estimate). Verifying it costs one more query token in the step: almost nothing while a step is
// bound by reading the weights (small batches), a full token's compute once the step is bound by
// arithmetic (large batches). So draft i is verified while a^i exceeds that marginal cost.
// Pure arithmetic on counts: no requests, no clocks.
#pragma once

namespace kvasir {

// Marginal cost of one more query token in a step of `num_decodes` decoding requests, as a share
// of what one emitted token is worth: kDraftCostAtBatch1 at batch 1, growing linearly to 1 at
// kComputeBoundBatch, where a verified token costs what a decoded one does and only drafts that
// are (nearly) certain pay. Measured on the CPU backend with SmolLM2 (docs/ARCHITECTURE.md,
// "Speculative decoding").
inline constexpr double kDraftCostAtBatch1 = 0.15;
inline constexpr int kComputeBoundBatch = 16;
double marginal_draft_cost(int num_decodes);

// Drafts to verify: the longest prefix of the available ones (capped at max_drafts) whose
// acceptance chance a^i stays above marginal_draft_cost(num_decodes).
int num_drafts_worth_verifying(int num_available, int max_drafts, double acceptance_rate, int num_decodes);

// The acceptance estimate after a verify step that accepted `num_accepted` of `num_verified`
// drafts. Each draft examined (the accepted ones, and the first rejected one) is one observation.
double updated_acceptance_rate(double rate, int num_verified, int num_accepted);

// A request that had drafts but verified none (its estimate said they were not worth it) drifts
// back toward the prior, so a request whose text turns repetitive later is tried again.
double relaxed_acceptance_rate(double rate);

}  // namespace kvasir
