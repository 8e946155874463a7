// EagleHeadConfig: an EAGLE-1/2 draft head's config.json (the format vLLM's llama_eagle.py
// EagleLlamaForCausalLM and SGLang's llama_eagle.py LlamaForCausalLMEagle load, e.g.
// yuhuili/EAGLE-LLaMA3-Instruct-8B: architectures LlamaForCausalLM / EagleLlamaForCausalLM /
// LlamaForCausalLMEagle / EAGLEModel, one Llama decoder layer), read and checked against the
// target's config once at load, and the list of weights such a head's model.safetensors holds.
// Plain data: must not bind or run anything (model/draft_heads/eagle_head.h does).
#pragma once

#include <optional>
#include <string>

#include "config/model_config.h"
#include "model/weight_manifest.h"

namespace kvasir {

struct EagleHeadConfig {
  // The head's decoder layer as a one-layer llama config: its heads, MLP, RMSNorm eps and its own
  // RoPE (theta, scaling); vocab_size is the target's (embedding and lm_head are the target's).
  ModelConfig layer;
  // Whether fc carries a bias: EAGLE's own config key "bias" (SafeAILab's cnets.py builds fc with
  // it; SGLang's fc always has one). Absent: the checkpoint decides (fc.bias present or not).
  std::optional<bool> fc_bias;
};

// `json_text`: the head's config.json; `where`: its path, for messages. Every field is checked:
// the architecture, hidden_size (and vocab_size when given) against the target's,
// num_hidden_layers 1, and every key either read, harmless metadata, or refused by name
// (model/draft_heads/head_config_keys.h; HASS's add_para_norm, a tied or scaled lm_head, ...).
StatusOr<EagleHeadConfig> parse_eagle_head_config(const std::string& json_text, const ModelConfig& target,
                                                  const std::string& where);

// The head's weights under their checkpoint names (role -> HF name), every shape from `c`:
// fc [H, 2H] and its optional bias; layer 0's attention, post_attention_layernorm and MLP (no
// input_layernorm: EAGLE's first layer has none; vLLM makes it an Identity, so a checkpoint's copy
// is left unread). embed_tokens / lm_head are the target's and are not listed (a checkpoint's
// copies are left unread, as vLLM and SGLang do). Names are unprefixed (vLLM's load_weights adds
// "model."); the speculators format (fusion_fc, transformer.*) is not read.
WeightManifest eagle_head_manifest(const EagleHeadConfig& c);

}  // namespace kvasir
