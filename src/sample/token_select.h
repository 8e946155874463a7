// Selection primitives over one logits row, shared by sampling and logprobs: argmax, the k-th
// largest value (radix select: one histogram pass plus a partial sort of one bucket, never a sort
// of the vocab), the top-p cutoff over unnormalised probabilities, and the inverse-CDF draw.
// Must not know about SamplingParams: callers turn knobs into thresholds.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "sample/sampler_workspace.h"

namespace kvasir {

// Maps a float to an unsigned key with the same order (negatives reversed), so radix buckets and
// comparisons never meet a NaN comparison (NaN sorts above +inf here).
inline uint32_t float_order_key(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Index of the largest value, ties -> lowest index; NaN never wins. 0 when every value is -inf/NaN.
int32_t argmax(std::span<const float> x);

// The k-th largest value of x counting duplicates (1 <= k <= x.size()). O(n).
float kth_largest(std::span<const float> x, int64_t k, SamplerWorkspace* ws);

// e[i] = exp((x[i] - x_max) / temperature) (e may alias x). Returns the mass of the entries with
// e >= min_e and e > 0. With for_top_p it also records that mass per bucket for top_p_cutoff,
// so top-p costs no extra pass over the vocab.
double fill_probs(std::span<const float> x, float x_max, float temperature, float min_e,
                  std::span<float> e, bool for_top_p, SamplerWorkspace* ws);

struct TopPCut {
  float cut = 0.0f;        // keep entries with e >= cut
  double kept_mass = 0.0;  // their total
};

// Top-p over the entries of e with e >= min_e and e > 0 (total `mass`): walking them by e
// descending, the first whose inclusive running sum reaches top_p * mass is the last kept, and
// every entry with an equal e stays too. Needs fill_probs(..., for_top_p = true) on the same e
// just before. When rounding keeps the walk from reaching the target, everything is kept.
TopPCut top_p_cutoff(std::span<const float> e, float min_e, double mass, float top_p,
                     SamplerWorkspace* ws);

// Inverse-CDF draw over the entries with e >= cut and e > 0, in ascending position: the first
// whose running sum exceeds u * kept_mass. Returns ids[pos] (or pos when ids is empty); when the
// sum never exceeds it (rounding), the last kept entry; -1 when nothing is kept. u in [0, 1).
int32_t draw_token(std::span<const int32_t> ids, std::span<const float> e, float cut,
                   double kept_mass, double u);

}  // namespace kvasir
