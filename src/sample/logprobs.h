// Logprobs of sampled tokens and of prompt tokens, from raw logits (vLLM's default
// "raw_logprobs": before logit_bias, penalties and temperature), in one flat layout that is sized
// once and written row by row. Must not pick tokens: that is the sampler's job.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvasir {

inline constexpr int32_t kNoToken = -1;

struct SamplerWorkspace;

// vLLM's LogprobsTensors. Row r, column 0 holds the token the row is about (the sampled token, or
// the prompt token that follows that position) and columns 1..N the row's top-N tokens by logprob
// (descending, ties -> lower id), N = that row's requested count. Unused cells: kNoToken / -inf.
struct LogprobsTensors {
  int num_rows = 0;
  int num_columns = 0;                // max N over rows + 1; 0 when no row asked for logprobs
  std::vector<int32_t> token_ids;     // [num_rows, num_columns]
  std::vector<float> logprobs;        // [num_rows, num_columns]
  std::vector<int32_t> ranks;         // [num_rows] 1-based rank of column 0's token; 0 = not asked
  std::vector<int32_t> num_logprobs;  // [num_rows] N of each row; -1 = row did not ask

  // Sizes every array and marks every row as not asked. Reuses capacity: no allocation once the
  // largest batch has been seen.
  void resize(int rows, int max_num_logprobs);

  int32_t token_id(int row, int col) const { return token_ids[size_t(row) * num_columns + col]; }
  float logprob(int row, int col) const { return logprobs[size_t(row) * num_columns + col]; }
};

// Fills row `row` of `out` for one raw logits row [vocab_size]: the logprob of `token_id`, its rank
// (the number of tokens whose logit is >= its logit, as vLLM counts it, so ties rank
// pessimistically) and the top `num_logprobs` (clamped to vocab_size). log-softmax: max
// subtracted, exp in float, the sum and the log in double.
void compute_row_logprobs(std::span<const float> logits_row, int32_t token_id, int num_logprobs,
                          int row, SamplerWorkspace* ws, LogprobsTensors* out);

}  // namespace kvasir
