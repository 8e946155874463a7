// The two replaceable blocks of a decoder layer: attention and MLP. DecoderModel owns the layer
// skeleton (norms, residual adds, embedding, logits) and calls one AttentionBlock and one MlpBlock
// per layer; a family with a different block (a MoE MLP, MLA attention) returns its own from
// ModelFamily::make_attention / make_mlp and leaves the rest of the decoder alone. Blocks run
// backend ops only: no allocation in forward(), no knowledge of requests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/model_config.h"
#include "layers/rope_table.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace kvasir {

// One layer's bound weights by manifest role ("attn_q.weight"); optional ones absent when the
// checkpoint lacks them.
struct LayerWeights {
  std::map<std::string, Tensor> tensors;
  // The tensor of `role`, or an empty Tensor (data == nullptr).
  Tensor get(const std::string& role) const;
};

// Activation buffers shared by every layer's blocks, sliced to this step's T rows. A block that
// needs other shapes allocates its own at creation (BlockInit::max_num_tokens rows).
struct BlockScratch {
  Tensor q;          // [T, num_heads * head_dim]
  Tensor k, v;       // [T, num_kv_heads * head_dim]
  Tensor attn;       // [T, num_heads * head_dim]
  Tensor gate, up;   // [T, intermediate_size]
};

// The RoPE tables a layer may use (owned by the model, built once at load).
struct RopeTables {
  RopeTable global;   // full-attention layers
  RopeTable sliding;  // sliding-window layers (gemma3: own base, unscaled)
};

struct BlockInit {
  const ModelConfig& config;
  const LayerWeights& weights;
  int layer = 0;
  bool sliding = false;        // this layer attends through the sliding window
  const RopeTables* rope = nullptr;
  Backend* backend = nullptr;
  int max_num_tokens = 0;      // rows of the largest batch forward() will see
};

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // What the layer caches per token; the model allocates k_cache / v_cache in this shape (an
  // empty v_cache when it has no V).
  virtual KvCacheShape cache_shape() const = 0;
  // h: [T, hidden] normed input; out: [T, hidden]. Writes this step's K/V into the layer's cache
  // through the slot mapping and attends over the block tables.
  virtual void forward(Backend& backend, const Tensor& h, const ForwardBatch& batch,
                       Tensor& k_cache, Tensor& v_cache, BlockScratch& scratch, Tensor& out) = 0;
};

class MlpBlock {
 public:
  virtual ~MlpBlock() = default;
  // h: [T, hidden] normed input; out: [T, hidden].
  virtual void forward(Backend& backend, const Tensor& h, BlockScratch& scratch, Tensor& out) = 0;
};

// The generic blocks: GQA attention with optional biases (q/k/v, and the output's), QK-norm, RoPE,
// sliding window, soft-capping and attention sinks; gated MLP (SiLU or GELU-tanh). Fail when a required weight is missing.
StatusOr<std::unique_ptr<AttentionBlock>> make_decoder_attention(const BlockInit& init);
StatusOr<std::unique_ptr<MlpBlock>> make_gated_mlp(const BlockInit& init);

}  // namespace kvasir
