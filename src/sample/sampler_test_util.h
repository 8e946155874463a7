// Helpers shared by the sampler tests: one-row calls and a reference softmax. Test-only.
#pragma once

#include <cmath>
#include <vector>

#include "sample/sampler.h"

namespace kvasir::testing {

// Owns everything a SamplingRequestState views.
struct Row {
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::vector<int32_t> eos;
  int num_generated_tokens = -1;  // -1: output.size()
  uint64_t rng_key = 1;

  SamplingRequestState state() const {
    SamplingRequestState s;
    s.params = &params;
    s.prompt_token_ids = prompt;
    s.output_token_ids = output;
    s.num_generated_tokens =
        num_generated_tokens >= 0 ? num_generated_tokens : static_cast<int>(output.size());
    s.eos_token_ids = eos;
    s.rng_key = rng_key;
    return s;
  }
};

inline std::vector<float> distribution_of(Sampler& sampler, std::vector<float> logits,
                                          const Row& row) {
  std::vector<float> probs(logits.size());
  sampler.distribution(logits, row.state(), probs);
  return probs;
}

inline int32_t sample_one(Sampler& sampler, std::vector<float> logits, const Row& row,
                          SamplerOutput* out_storage = nullptr) {
  SamplerOutput local;
  SamplerOutput* out = out_storage ? out_storage : &local;
  const SamplingRequestState st = row.state();
  sampler.sample(logits, std::span<const SamplingRequestState>(&st, 1), out);
  return out->sampled_token_ids[0];
}

inline std::vector<double> softmax(const std::vector<double>& x) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v);
  std::vector<double> p(x.size());
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(x[i] - m);
  for (double& v : p) v /= s;
  return p;
}

// Expects probs[i] == want[i] for every i (absolute tolerance).
#define EXPECT_DIST_NEAR(probs, want, tol)                           \
  do {                                                               \
    ASSERT_EQ((probs).size(), (want).size());                        \
    for (size_t i_ = 0; i_ < (want).size(); ++i_) {                  \
      EXPECT_NEAR((probs)[i_], (want)[i_], (tol)) << "token " << i_; \
    }                                                                \
  } while (0)

}  // namespace kvasir::testing
