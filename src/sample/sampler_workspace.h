// SamplerWorkspace: one worker's scratch for sampling and logprobs, sized once from the vocab so
// the per-step path allocates nothing (the undo log and pair list only grow to their high-water
// mark). Internal to sample/; must not be shared between threads.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvasir {

// Radix buckets for selection: the top 12 bits of a float's order-preserving key.
inline constexpr int kNumSelectBuckets = 4096;

struct SamplerWorkspace {
  explicit SamplerWorkspace(int32_t vocab_size)
      : counts(vocab_size, 0),
        seen(vocab_size, 0),
        e(vocab_size),
        cand_ids(vocab_size),
        cand_e(vocab_size),
        scratch(vocab_size) {
    undo.reserve(1024);
    touched.reserve(1024);
  }

  std::vector<std::pair<int32_t, float>> undo;   // (id, old logit) of in-place edits
  std::vector<int32_t> counts;                   // [vocab] output-token counts; all 0 between rows
  std::vector<uint8_t> seen;                     // [vocab] prompt|output flags; all 0 between rows
  std::vector<int32_t> touched;                  // ids whose counts/seen are set
  std::vector<float> e;                          // [vocab] exp((x - x_max) / T)
  std::vector<int32_t> cand_ids;                 // [vocab] top-k candidates, ascending id
  std::vector<float> cand_e;                     // [vocab] their e
  std::vector<float> scratch;                    // [vocab] selection scratch
  std::vector<std::pair<float, int32_t>> pairs;  // top-N logprob candidates
  std::array<uint32_t, kNumSelectBuckets> hist_count{};
  std::array<double, kNumSelectBuckets> hist_mass{};
};

}  // namespace kvasir
