// The model's own sampling defaults, read from its generation_config.json once at load, as vLLM's
// `--generation-config auto` reads them: temperature, top_p, top_k, min_p, repetition_penalty,
// and max_new_tokens (the default max_tokens). Plain data; `kvasir serve` and `kvasir generate`
// put them under explicit request / command-line values. Must not read any other file or key.
#pragma once

#include <optional>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "core/sampling_params.h"

namespace kvasir {

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int> max_new_tokens;  // only a positive integer counts (else ignored, as vLLM)

  bool empty() const;
  // Overwrites the sampling fields the model sets (not max_tokens: how a default length combines
  // with the context left is the caller's rule).
  void apply_to(SamplingParams* params) const;
  // The sampling fields the model sets, as JSON (for the start-up log).
  Json to_json() const;
};

// The defaults in a parsed generation_config.json. A sampling key of the wrong type is an error
// naming `where` and the key; unknown keys (eos_token_id, do_sample, ...) are not ours to read.
StatusOr<GenerationDefaults> generation_defaults_from_json(const Json& generation_config, const std::string& where);

// <dir>/generation_config.json read and parsed; nullopt when the folder has none.
StatusOr<std::optional<Json>> read_generation_config(const std::string& dir);

}  // namespace kvasir
