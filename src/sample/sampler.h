// Sampler (host reference): turns a batch of float32 logits rows into one token per row, plus
// logprobs when asked, following each request's SamplingParams. The CUDA backend's sampler is a
// twin of this one and is tested against it. Must not know about requests, the scheduler or
// threads: the runner builds plain SamplingRequestState views and owns the threads.
//
// Per row, in vLLM v1's order (every step is skipped when its knob is off):
//   1. logit_bias: x[id] += bias.
//   2. min_tokens: while num_generated_tokens < min_tokens, x[id] = -inf for stop_token_ids and,
//      unless ignore_eos, for eos_token_ids.
//   3. repetition_penalty r, for each distinct id in prompt + output: x > 0 ? x / r : x * r.
//   4. frequency f and presence p, for each distinct id in output with count c: x -= f * c + p.
//   5. greedy (temperature == 0): argmax of x, ties -> lowest id; no softmax. Done.
//   6. temperature T: e_i = exp((x_i - x_max) / T), so the max token has e = 1.
//   7. min_p: keep e_i >= min_p (i.e. prob >= min_p * max prob; vLLM v1 applies it before top-k/p,
//      which only matters for top-p's normalisation).
//   8. top_k (1 <= k < vocab): keep x_i >= the k-th largest x (ties at the k-th value are kept).
//   9. top_p (< 1): among the kept set, sorted by e descending, the first token whose inclusive
//      cumulative mass reaches top_p * (kept mass) is the last kept; every kept token with
//      e >= its e stays (ties kept).
//  10. draw: u = philox_uniform(rng_key, num_generated_tokens, kRngStreamToken); walk the kept
//      tokens in ascending id order summing e (in double) and pick the first whose running sum
//      exceeds u * (kept mass). A twin may differ only where float rounding moves that boundary.
// Logprobs use the raw row: logits are edited in place during a row and restored before return.
// A row whose every logit ends up -inf (or NaN) falls back to the argmax rule.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/sampling_params.h"
#include "sample/logprobs.h"

namespace kvasir {

// What the sampler needs to know about one row's request. Views only: the runner keeps the
// storage alive for the call. Build rng_key once per request with rng_key_for_request (philox.h).
struct SamplingRequestState {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;  // repetition penalty; may be empty when r == 1
  std::span<const int32_t> output_token_ids;  // all penalties; may be empty when all are off
  int num_generated_tokens = 0;               // min_tokens and the RNG position
  std::span<const int32_t> eos_token_ids;     // model/generation-config EOS ids
  uint64_t rng_key = 0;
};

struct SamplerOutput {
  std::vector<int32_t> sampled_token_ids;  // [num_rows]
  LogprobsTensors logprobs;                // rows whose params.logprobs is set
};

class Sampler {
 public:
  // vocab_size = the logits row length. num_workers = how many threads may call the *_rows
  // functions at once; each worker has its own scratch (a few vocab-sized arrays).
  explicit Sampler(int32_t vocab_size, int num_workers = 1);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  int32_t vocab_size() const { return vocab_size_; }
  int num_workers() const { return static_cast<int>(workspaces_.size()); }

  // Whole batch on the calling thread. logits: [rows.size(), vocab_size], restored on return.
  void sample(std::span<float> logits, std::span<const SamplingRequestState> rows,
              SamplerOutput* out);

  // Sizes `out` for `rows` (call once before handing row ranges to workers).
  static void prepare_output(std::span<const SamplingRequestState> rows, SamplerOutput* out);

  // Rows [row_begin, row_end) with `worker`'s scratch. Calls with distinct workers on disjoint
  // row ranges may run concurrently; `out` must come from prepare_output for the same rows.
  void sample_rows(std::span<float> logits, std::span<const SamplingRequestState> rows,
                   int row_begin, int row_end, int worker, SamplerOutput* out);

  // The distribution step 10 draws from for one row: probs [vocab_size], zero outside the kept
  // set, one-hot on the argmax for greedy. For tests and for checking the CUDA twin; the row is
  // left as it was.
  void distribution(std::span<float> logits_row, const SamplingRequestState& state,
                    std::span<float> probs, int worker = 0);

  // Prompt logprobs: row i of logits [num_rows, vocab_size] is the model's prediction after
  // prompt position i and target_token_ids[i] the prompt token that actually follows it.
  void prompt_logprobs(std::span<const float> logits, std::span<const int32_t> target_token_ids,
                       int num_logprobs, LogprobsTensors* out);
  // The same for rows [row_begin, row_end); `out` sized by out->resize(num_rows, num_logprobs).
  void prompt_logprobs_rows(std::span<const float> logits,
                            std::span<const int32_t> target_token_ids, int num_logprobs,
                            int row_begin, int row_end, int worker, LogprobsTensors* out);

 private:
  int32_t sample_row(float* row, const SamplingRequestState& state, SamplerWorkspace* ws);

  int32_t vocab_size_;
  std::vector<std::unique_ptr<SamplerWorkspace>> workspaces_;
};

}  // namespace kvasir
