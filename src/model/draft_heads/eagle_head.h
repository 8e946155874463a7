// EagleHead: an EAGLE-1/2 draft head bound to its target DecoderModel, run with backend ops only
// (every backend). One pass over a flattened batch, per token at position p:
//   hidden = the target's final-normed hidden state at p               (first pass of a step)
//          | the head's own output at p - 1                              (each later draft pass)
//   x = fc([embed(token p + 1), hidden]) (+ fc.bias)                     ([T, 2H] -> [T, H])
//   x += attention(x) over the head's own one-layer paged KV cache, RoPE at p (no input norm)
//   x += mlp(rmsnorm_post(x))                                            (the pass's output)
//   logits = target's lm_head(x), no norm before it; draft ids are target ids
// as vLLM's llama_eagle.py (EagleLlamaForCausalLM: layer 0's input_layernorm is an Identity, the
// model returns hidden_states + residual, compute_logits is lm_head alone) and SGLang's
// llama_eagle.py; embed_tokens and lm_head are the target's (vLLM's EagleProposer shares both
// without pipeline parallelism; SGLang's EAGLE worker set_embed_and_head). Must not know about
// requests: runner/eagle_proposer.h keeps the positions, blocks and rollbacks.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/blocks.h"
#include "model/decoder_model.h"
#include "model/draft_heads/draft_head.h"
#include "model/draft_heads/eagle_head_config.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace kvasir {

class EagleHead final : public DraftHead {
 public:
  // Binds the head's weights from `weights` on the target's backend and makes the target keep
  // its final-normed hidden states. max_num_tokens: the most tokens of one pass (at most the
  // target's workspace); max_num_rows: the most logits rows of one call.
  static StatusOr<std::unique_ptr<EagleHead>> create(const EagleHeadConfig& config, const WeightSource& weights,
                                                     DecoderModel& target, int max_num_tokens, int max_num_rows);
  ~EagleHead() override;

  const EagleHeadConfig& config() const { return config_; }
  bool has_fc_bias() const { return fc_bias_.data != nullptr; }
  size_t kv_cache_bytes_per_block(int block_size) const override;
  StatusOr<KvCache> allocate_kv_cache(int num_blocks, int block_size) override;
  // DraftHead::forward; kTarget rows index the target's final_hidden_states().
  Status forward(const ForwardBatch& batch, HiddenFrom from, const int32_t* hidden_rows, KvCache& cache) override;
  // out: [num_rows] host target ids; num_rows <= max_num_rows.
  Status greedy_target_tokens(const int32_t* rows, int num_rows, int32_t* out) override;
  BackendCapabilities backend_capabilities() const override { return backend_.capabilities(); }
  int max_num_tokens() const override { return max_num_tokens_; }
  int max_num_rows() const override { return max_num_rows_; }
  // float32 logits over the target's vocabulary, [num_rows, vocab_size] host (tests).
  Status draft_logits(const int32_t* rows, int num_rows, float* out);

 private:
  EagleHead(const EagleHeadConfig& config, DecoderModel& target, int max_num_tokens, int max_num_rows);
  Status bind(const WeightSource& weights);
  Status allocate_workspace();
  StatusOr<Tensor> logits_on_device(const int32_t* rows, int num_rows);

  EagleHeadConfig config_;
  DecoderModel& target_;
  Backend& backend_;
  int max_num_tokens_, max_num_rows_;
  float eps_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  LayerWeights weights_;
  Tensor embed_, lm_head_;  // the target's
  Tensor fc_, fc_bias_, post_norm_;
  std::unique_ptr<RopeTables> rope_;
  std::unique_ptr<AttentionBlock> attn_;
  std::unique_ptr<MlpBlock> mlp_;
  // Workspace ([T] rows = max_num_tokens): hidden_[cur_] is the last forward's output.
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor hidden_[2];  // [T, H] residual stream (pass input, then output)
  int cur_ = 0;
  int last_num_tokens_ = 0;
  Tensor halves_;     // [2T, H] embeddings, then the hidden states fed in
  Tensor cat_;        // [T, 2H] the two halves side by side (fc's input)
  HeadLayerStep layer_;  // the layer's workspace
  Tensor last_;       // [R, H]
  Tensor logits_;     // [R, vocab] float32
  std::vector<int32_t> interleave_rows_;  // [2T] each token's normed embedding row, then its hidden row
  std::vector<float> host_logits_;
  std::vector<DeviceSamplingRow> greedy_rows_;
};

}  // namespace kvasir
