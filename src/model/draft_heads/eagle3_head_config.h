// Eagle3HeadConfig: an EAGLE-3 draft head's config.json (the format vLLM's and SGLang's
// llama_eagle3.py load: architectures LlamaForCausalLMEagle3, one Llama decoder layer, draft_vocab_size,
// eagle_config.eagle_aux_hidden_state_layer_ids), read and checked against the target's config
// once at load, and the list of weights such a head's model.safetensors holds. Plain data: must
// not bind or run anything (model/draft_heads/eagle3_head.h does).
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/weight_manifest.h"

namespace kvasir {

struct Eagle3HeadConfig {
  // The head's decoder layer as a one-layer llama config: its heads, MLP, RMSNorm eps and its own
  // RoPE (theta, scaling); vocab_size is the target's (the token embedding is the target's ids).
  ModelConfig layer;
  int64_t draft_vocab_size = 0;  // rows of lm_head; draft id d is target id d + d2t[d]
  // The target layers whose input hidden states fc fuses, ascending (vLLM concatenates them in
  // layer order whatever order the config lists them in). Default (2, L/2, L-3), as vLLM's.
  std::vector<int> aux_layer_ids;
  // vLLM's norm_before_residual: the layer's residual is the normed hidden state, not the raw one.
  bool norm_before_residual = false;
};

// `json_text`: the head's config.json; `where`: its path, for messages. Every field is checked:
// the architecture, hidden_size against the target's (a head for another model is refused naming
// both), vocab_size, draft_vocab_size <= vocab_size, num_hidden_layers 1, the three aux layer ids
// distinct and inside the target's layers; every key either read, harmless metadata, or refused
// by name (model/draft_heads/head_config_keys.h; a tied lm_head, eagle_config keys other than the aux ids).
StatusOr<Eagle3HeadConfig> parse_eagle3_head_config(const std::string& json_text, const ModelConfig& target,
                                                    const std::string& where);

// The head's weights under their checkpoint names (role -> HF name), every shape from `c`:
// model-level embed_tokens (optional: absent means the target's embedding), fc [H, 3H],
// norm, lm_head [draft_vocab, H]; layer 0 the midlayer (q/k/v read 2H columns, hidden_norm).
// d2t / t2d are integer tensors read apart (model/draft_heads/eagle3_head.cpp).
WeightManifest eagle3_head_manifest(const Eagle3HeadConfig& c);

}  // namespace kvasir
