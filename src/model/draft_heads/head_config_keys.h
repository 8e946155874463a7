// What both speculative heads' config.json readers (EAGLE-1/2, EAGLE-3) share: the keys a head
// config may hold (a key that would change the head's computation and that Kvasir does not
// implement is refused by name rather than silently ignored), its integer fields, its sizes
// against the target's, and its decoder layer read as a one-layer llama. Plain data checks: must
// not bind or run anything.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "config/model_config.h"

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

// The config's one architecture name (`architectures` is a list of one string), or nullptr.
const std::string* single_architecture(const Json& config);

// `key` as a positive integer; absent (or null): an error naming it when `required`, else `def`.
// Messages begin with `what`.
StatusOr<int64_t> head_positive_int(const Json& config, const char* key, bool required, int64_t def,
                                    const std::string& what);

// hidden_size (required) and vocab_size (default: the target's) must equal the target's: a head is
// trained for one model. Returns the vocabulary size.
StatusOr<int64_t> check_head_sizes(const Json& config, const ModelConfig& target, const std::string& what);

// The head's decoder layer through the llama reader (heads, head_dim, MLP, eps, RoPE) as a
// one-layer model of `vocab` tokens; attention biases, QK-norm and sliding windows are refused
// (`kind`: "EAGLE head", for the message).
StatusOr<ModelConfig> head_layer_config(Json config, int64_t vocab, const std::string& what, const std::string& kind);

}  // namespace kvasir
