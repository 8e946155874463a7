// Reads vLLM/OpenAI-named sampling fields from a JSON object into SamplingParams, type-checking
// each one (a string where a number belongs is a clear error naming the field). Shared by the
// HTTP server and `kvasir generate`'s JSONL input (its own small library, kvasir_sampling_json).
// Range and vocabulary checks are the engine's RequestValidator's, not this file's.
#pragma once

#include "common/json.h"
#include "core/sampling_params.h"

namespace kvasir {

// Fields: n, temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
// frequency_penalty, logit_bias, seed, max_tokens (or max_completion_tokens), min_tokens,
// ignore_eos, stop (string or list), stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, logprobs (int, or true with top_logprobs for chat), prompt_logprobs.
// Unknown fields are ignored (the caller decides whether that is an error).
Status apply_sampling_json(const Json& obj, SamplingParams* params, bool chat_logprobs = false);

}  // namespace kvasir
