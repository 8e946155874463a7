// Verification of speculative drafts: which of a request's draft tokens the target model keeps,
// and the token it adds after them, so that the output has exactly the target's distribution.
// Host reference; the runner calls it for rows with drafts (the device path does not take those).
// Must not know about requests or the scheduler: sampler states and token ids in, counts out.
//
// Drafts without a distribution (ngram, suffix: q is one-hot on the draft) are verified by
// coupling: position j (0 <= j <= k) is sampled by the ordinary Sampler exactly as a plain step
// would sample it (every logit edit, the penalties counting drafts 0..j-1 as output, the same
// Philox draw at output position g + j), and drafts are kept while they equal those samples. The
// first differing sample (or the sample after the last draft, the "bonus") ends the run. This is
// the rejection rule for one-hot q: draft d is kept with probability p(d), and on rejection the
// token is distributed as p with d removed and renormalized. It also makes greedy and seeded
// outputs identical with speculation on or off, whatever number of drafts was tried.
//
// Drafts with a distribution q (draft models, later) use `rejection_sample` (Leviathan et al.):
// keep d with probability min(1, p(d) / q(d)), else sample from max(0, p - q) renormalized.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sample/sampler.h"

namespace kvasir {

// One request to verify. state.output_token_ids spans the output so far THEN the k drafts, and
// state.num_generated_tokens counts the output only.
struct DraftVerifyRequest {
  SamplingRequestState state;
  int num_drafts = 0;
  std::span<const int32_t> drafts() const {
    return state.output_token_ids.subspan(state.output_token_ids.size() - static_cast<size_t>(num_drafts));
  }
};

// Appends the 1 + num_drafts sampler rows of `req` to `rows`: row j sees drafts 0..j-1 as output
// (penalties, min_tokens) and draws at output position g + j.
void append_verify_rows(const DraftVerifyRequest& req, std::vector<SamplingRequestState>* rows);

// How many tokens the step emits (1 ... k + 1), given the target's samples at the 1 + k positions:
// the drafts equal to the samples up to the first mismatch, then that sample (or the bonus).
// The emitted tokens are target_samples[0, result).
int num_emitted_tokens(std::span<const int32_t> drafts, std::span<const int32_t> target_samples);

// One position of standard speculative sampling. p, q: [vocab] probabilities (q(draft) > 0).
// u_accept, u_residual: independent uniforms in [0, 1). Returns the token and whether the draft
// was kept. A residual with no mass (p <= q everywhere, only by rounding) falls back to p.
int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, double u_accept,
                         double u_residual, bool* accepted);

}  // namespace kvasir
