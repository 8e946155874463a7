// Eagle3Head: an EAGLE-3 draft head bound to its target DecoderModel, run with backend ops only
// (every backend). One pass over a flattened batch, per token at position p:
//   hidden = fc(target's hidden states entering its aux layers at p)   (first pass of a step)
//          | the head's own output at p - 1                             (each later draft pass)
//   x = [rmsnorm_in(embed(token p + 1)), rmsnorm_hidden(hidden)]        ([T, 2H]: q/k/v read both)
//   (config norm_before_residual: hidden = rmsnorm_hidden(hidden) from here on)
//   hidden += attention(x) over the head's own one-layer paged KV cache, RoPE at p
//   hidden += mlp(rmsnorm_post(hidden))                                  (the pass's output)
//   logits = lm_head(rmsnorm(hidden)) over the draft vocabulary; target id = d + d2t[d]
// as vLLM's / SGLang's llama_eagle3.py. Concatenations are row gathers of a [2T, H] (or [3T, H])
// buffer into a [T, 2H] (or [T, 3H]) one, so no backend needs an op of its own. Must not know
// about requests: runner/eagle_proposer.h keeps the positions, blocks and rollbacks.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/blocks.h"
#include "model/decoder_model.h"
#include "model/draft_heads/draft_head.h"
#include "model/draft_heads/eagle3_head_config.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace kvasir {

class Eagle3Head final : public DraftHead {
 public:
  // Binds the head's weights from `weights` on the target's backend and makes the target keep
  // the hidden states of config.aux_layer_ids. max_num_tokens: the most tokens of one pass (the
  // target's --max-num-batched-tokens); max_num_rows: the most logits rows of one call.
  static StatusOr<std::unique_ptr<Eagle3Head>> create(const Eagle3HeadConfig& config, const WeightSource& weights,
                                                      DecoderModel& target, int max_num_tokens, int max_num_rows);
  ~Eagle3Head() override;

  const Eagle3HeadConfig& config() const { return config_; }
  size_t kv_cache_bytes_per_block(int block_size) const override;
  StatusOr<KvCache> allocate_kv_cache(int num_blocks, int block_size) override;
  // DraftHead::forward; kTarget rows index the target's captured aux hidden states.
  Status forward(const ForwardBatch& batch, HiddenFrom from, const int32_t* hidden_rows, KvCache& cache) override;
  // Greedy drafts: for each of `rows` of the last forward, the target id of the draft
  // vocabulary's argmax. out: [num_rows] host; num_rows <= max_num_rows.
  Status greedy_target_tokens(const int32_t* rows, int num_rows, int32_t* out) override;
  BackendCapabilities backend_capabilities() const override { return backend_.capabilities(); }
  int max_num_tokens() const override { return max_num_tokens_; }
  int max_num_rows() const override { return max_num_rows_; }
  // float32 logits over the draft vocabulary, [num_rows, draft_vocab_size] host (tests).
  Status draft_logits(const int32_t* rows, int num_rows, float* out);
  // The target id of draft id d.
  int32_t target_id(int32_t draft_id) const { return draft_id + d2t_[static_cast<size_t>(draft_id)]; }

 private:
  Eagle3Head(const Eagle3HeadConfig& config, DecoderModel& target, int max_num_tokens, int max_num_rows);
  Status bind(const WeightSource& weights);
  Status read_vocab_maps(const WeightSource& weights);
  Status allocate_workspace();
  StatusOr<Tensor> logits_on_device(const int32_t* rows, int num_rows);

  Eagle3HeadConfig config_;
  DecoderModel& target_;
  Backend& backend_;
  int max_num_tokens_, max_num_rows_;
  float eps_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  LayerWeights weights_;
  Tensor embed_, fc_, norm_, lm_head_, attn_norm_, hidden_norm_, post_norm_;
  std::unique_ptr<RopeTables> rope_;
  std::unique_ptr<AttentionBlock> attn_;
  std::unique_ptr<MlpBlock> mlp_;
  std::vector<int32_t> d2t_;  // [draft_vocab]
  // Workspace ([T] rows = max_num_tokens): hidden_[cur_] is the last forward's output.
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor hidden_[2];        // [T, H] residual stream (pass input, then output)
  int cur_ = 0;
  int last_num_tokens_ = 0;
  Tensor fused_;            // [T, 3H] the target's aux states side by side (fc's input)
  Tensor halves_;           // [2T, H] normed embeddings, then normed hidden states
  Tensor cat_;              // [T, 2H] the two halves side by side
  HeadLayerStep layer_;  // the layer's workspace
  Tensor last_;             // [R, H]
  Tensor logits_;           // [R, draft_vocab] float32
  std::vector<int32_t> gather_rows_;  // [3T] the aux states' rows, token by token
  std::vector<int32_t> interleave_rows_;  // [2T] each token's normed embedding row, then its hidden row
  std::vector<float> host_logits_;
  std::vector<DeviceSamplingRow> greedy_rows_;
};

}  // namespace kvasir
