// OpenAI protocol, outbound half: request ids, usage, the two logprobs shapes (legacy
// completions and chat), stream-chunk envelopes and server-sent-event framing. Pure functions
// of their inputs plus the tokenizer (for token strings); must not touch the engine or sockets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "engine/request_output.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::server {

// "<prefix>" + 32 random hex digits, e.g. "cmpl-4f1c...".
std::string make_request_id(std::string_view prefix);
int64_t unix_time_s();

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// JSON has no -inf: a logprob of -inf is reported as -9999.0, as vLLM does.
double json_logprob(float logprob);
// The text a logprobs entry shows for a token (its own decode, special tokens kept).
std::string token_text(const Tokenizer& tok, int32_t id);

// The legacy completions logprobs object, built up over a choice's tokens (and its echoed
// prompt): {"text_offset", "token_logprobs", "tokens", "top_logprobs"}.
class CompletionLogprobs {
 public:
  // A position without a logprob (the first prompt token when echoing).
  void add_unscored(const Tokenizer& tok, int32_t token_id);
  void add(const Tokenizer& tok, const PositionLogprobs& p);
  Json take();  // the object so far; resets the lists (the text offset keeps counting)
  bool empty() const { return tokens_.size() == 0; }
  void set_offset(size_t offset) { offset_ = offset; }

 private:
  Json text_offset_ = Json::array();
  Json token_logprobs_ = Json::array();
  Json tokens_ = Json::array();
  Json top_logprobs_ = Json::array();
  size_t offset_ = 0;
};

// The chat logprobs object {"content": [{"token", "logprob", "bytes", "top_logprobs"}]};
// `num_top` top alternatives per position (OpenAI's top_logprobs).
Json chat_logprobs_json(const Tokenizer& tok, const std::vector<PositionLogprobs>& lps, int num_top);

// vLLM's `prompt_logprobs`: one entry per prompt token, null for the first (nothing predicts
// it), then {"<token id>": {"logprob", "rank", "decoded_token"}} holding the prompt token and the
// top alternatives (at most num_top of them).
Json prompt_logprobs_json(const Tokenizer& tok, const std::vector<PositionLogprobs>& lps, int num_top);

// {"id", "object", "created", "model", "choices": [...]} (+ "usage" when not null).
Json response_envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                       Json choices, Json usage = Json());

// Json::dump with any invalid UTF-8 replaced by U+FFFD (clients reject broken UTF-8).
std::string dump_json_utf8(const Json& j);
// "data: <json>\n\n" and the stream terminator.
std::string sse_event(const Json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace kvasir::server
