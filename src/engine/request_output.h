// RequestOutput: what a client of the engine receives for one request, one delta at a time:
// new text and token ids since the last delta, their logprobs, and on the last delta the finish
// reason and usage counts. Plain data; the server and the offline API both consume it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvasir {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
};

// Logprobs of one position: the chosen token first, then the top-N alternatives.
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

struct RequestOutput {
  std::string request_id;
  int index = 0;                          // which of the n samples
  std::string text;                       // delta
  std::vector<int32_t> token_ids;         // delta
  std::vector<PositionLogprobs> logprobs; // delta, one per token in token_ids when asked
  std::vector<PositionLogprobs> prompt_logprobs;  // once, on the first delta, when asked
  bool finished = false;
  std::string finish_reason;              // "stop", "length", "abort", "error"
  std::optional<int32_t> stop_reason_token;
  std::optional<std::string> stop_reason_str;
  std::string error_message;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;          // total so far
  int32_t num_cached_tokens = 0;
};

}  // namespace kvasir
