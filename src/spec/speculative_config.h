// SpeculativeConfig: vLLM's --speculative-config / speculative_config= JSON object, read and checked
// once at start. Only the keys of the methods built here are accepted (so vLLM's tree and other
// drafting options, e.g. speculative_token_tree, are refused by name); a method that is not built
// yet (mtp, medusa, mlp_speculator, deepseek_mtp) is refused by name. Plain data: the scheduler reads
// how many drafts a request may carry, the runner which proposer to build.
#pragma once

#include <string>

#include "common/status.h"
#include "spec/suffix_decoding.h"

namespace kvasir {

struct SpeculativeConfig {
  std::string method;              // "ngram", "suffix", "draft_model", "eagle" or "eagle3"; empty = off
  int num_speculative_tokens = 0;  // drafts proposed per request per step, at most
  // ngram: the match length tried first (max) down to the shortest one accepted (min).
  int prompt_lookup_min = 0;
  int prompt_lookup_max = 0;
  // suffix: vLLM's suffix_decoding_* keys (its num_speculative_tokens is the one above).
  SuffixDecodingConfig suffix;
  // draft_model: the draft's .gguf file or HF directory ('model'; vLLM infers the method from it).
  // eagle / eagle3: the EAGLE-1/2 / EAGLE-3 head's HF directory (config.json +
  // model.safetensors), or with --load-format dummy its config.json (random weights).
  std::string draft_model;

  bool enabled() const { return !method.empty(); }
};

// Largest num_speculative_tokens / prompt_lookup_max accepted: past this a verify step is mostly
// rejected work, and the bound keeps a typo from sizing buffers by it.
constexpr int kMaxSpeculativeTokens = 64;

// Parses the JSON text of --speculative-config. Every bad field is an invalid_argument naming it.
StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& json_text);

}  // namespace kvasir
