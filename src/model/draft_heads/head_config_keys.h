// The keys a speculative head's config.json (EAGLE-1/2 or EAGLE-3) may hold. A head config is
// read once at load; a key that would change the head's computation and that Kvasir does not
// implement must be refused by name rather than silently ignored. Plain data checks: must not
// bind or run anything.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace kvasir {

// Checks every top-level key of `config`: the llama decoder-layer keys both heads share (sizes,
// eps, RoPE, which model_config_from_hf_json reads and checks), metadata that cannot change a
// forward pass (ids, dtype, versions, initializer_range, use_cache, ...), and `head_keys`, the
// head kind's own (its parser reads those). Refused, naming the key: attention_bias / mlp_bias
// true (the head's linears have no biases here), hidden_act other than silu, a sliding_window,
// pretraining_tp not a positive integer, and any key not in those lists (quantization_config, ...).
// `what`: "EAGLE-3 head <path>" and the like, for messages.
Status check_head_config_keys(const Json& config, std::initializer_list<std::string_view> head_keys,
                              const std::string& what);

}  // namespace kvasir
