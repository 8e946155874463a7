// ModelConfig: the hyperparameters of a decoder-only transformer, read once from GGUF metadata or
// an HF config.json (+ generation_config.json) and validated, so the model code can trust every
// field. Format quirks are resolved when reading, not in the forward pass: GGUF-vs-HF norm weight
// offsets, rope pairing, a family's implicit constants (stated by the family as ConfigTraits, see
// config_readers.h). Must not name a model family or touch tensor data or vocabularies.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvasir {

class GgufFile;
class Json;

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn, kLongrope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                           // linear, llama3, yarn, longrope
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  // yarn: the correction range [low, high] rounded out to whole dimensions (floor / ceil), as
  // transformers does unless the config says "truncate": false (gpt-oss).
  bool truncate = true;
  double attention_factor = 0.0;                 // yarn; 0: derive as 0.1 * ln(factor) + 1
  // longrope (HF "longrope", formerly "su"): per-dimension divisors [rotary_dim / 2] of the
  // inverse frequencies; a sequence longer than original_max_position_embeddings uses
  // long_factor, a shorter one short_factor (transformers' rule, per sequence). cos/sin are scaled
  // by attention_factor (derived when 0: sqrt(1 + ln(factor) / ln(original)), 1 if factor <= 1).
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  // GGUF llama3-style files carry no scaling metadata: llama.cpp's converter precomputes the
  // per-dimension divisors into the tensor "rope_freqs.weight" [rotary_dim / 2]; divide each
  // inverse frequency by it.
  bool freq_factors_tensor = false;
};

// How RoPE pairs the dimensions of a head. HF checkpoints always use kNeox (rotate_half: i with
// i + rotary_dim/2). llama.cpp's converter permutes the Q and K rows of llama-family weights so
// that GGUF "llama" files need kInterleaved (pairs 2i, 2i+1); qwen2/qwen3/gemma* GGUFs stay kNeox.
enum class RopeStyle { kNeox, kInterleaved };

enum class Activation { kSilu, kGeluTanh };  // gated MLP: act(gate) * up

struct ModelConfig {
  // The model family's registry name (model/registry.h): "llama", "qwen2", "gemma3", ...
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;    // may differ from hidden_size / num_heads (gemma3: 256 with hidden 640)
  int64_t rotary_dim = 0;  // dimensions of each head that RoPE rotates; == head_dim unless partial
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;        // full-attention (global) layers
  double rope_theta_local = 10000.0;  // sliding-window layers; == rope_theta except gemma3 (10000)
  RopeScaling rope_scaling;           // gemma3 applies it to global layers only
  RopeStyle rope_style = RopeStyle::kNeox;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;              // lm_head reuses the embedding matrix
  bool attention_bias = false;                   // q/k/v projections have biases (qwen2)
  int64_t sliding_window = 0;                    // 0: no sliding-window attention
  std::vector<bool> layer_is_sliding;            // [num_layers]; all false when sliding_window == 0
  std::optional<double> attn_logit_softcapping;  // gemma2: scores = cap * tanh(scores / cap)
  std::optional<double> final_logit_softcapping;  // gemma2 (and gemma3 if set)
  // Attention scores are scaled by 1 / sqrt(query_pre_attn_scalar); head_dim unless the model
  // says otherwise (gemma2/3 27B: hidden_size / num_heads).
  double query_pre_attn_scalar = 0;
  bool qk_norm = false;           // RMSNorm over each head of q and k before RoPE (gemma3, qwen3)
  bool post_block_norms = false;  // extra RMSNorm after attention and after the MLP (gemma2/3)
  double embedding_scale = 1.0;   // embeddings are multiplied by this (gemma: sqrt(hidden_size))
  // RMSNorm computes x * (norm_weight_offset + w). HF gemma checkpoints store w and add 1 in
  // forward; llama.cpp's converter adds the 1 to every *norm.weight when writing GGUF, so GGUF
  // gemma files need 0. Everything else: 0.
  double norm_weight_offset = 0.0;
  Activation activation = Activation::kSilu;
  int64_t bos_token_id = -1;           // -1: none
  std::vector<int64_t> eos_token_ids;  // generation stops on any of these
  int64_t pad_token_id = -1;
  // Numbers only one family's own code reads (a MoE family's "num_experts" and
  // "num_experts_per_tok", an MLA family's ranks), set by its read_hf_extras / read_gguf_extras
  // hook (model/model_family.h), so that adding a family needs no new field here.
  std::map<std::string, double> family_params;

  // Built by the model registry (model/registry.h: model_config_from_gguf / _from_hf_json /
  // _from_hf_dir), which finds the file's family first; config/ itself names no family.

  // InvalidArgument naming the first inconsistent field.
  Status validate() const;
  double attention_scale() const;  // 1 / sqrt(query_pre_attn_scalar)
  std::string to_string() const;   // one line for logs
};

std::string_view rope_scaling_type_name(RopeScalingType t);

}  // namespace kvasir
