// DecoderModel: the one generic decoder-only transformer that every family configures (registry.h):
// the family's manifest says which weights to bind, its blocks (blocks.h) run attention and the
// MLP of each layer, and ModelConfig says the rest (norms, sliding layers, RoPE variants,
// soft-capping, embedding scaling). forward() runs a flattened batch of several sequences through
// the backend ops, reading and writing K/V via block tables and a slot mapping. Must not know
// about requests, scheduling or sampling, nor test a family by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/model_config.h"
#include "layers/rope_table.h"
#include "loader/weight_source.h"
#include "model/blocks.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/pipeline_parallel.h"
#include "model/tensor_parallel.h"

namespace kvasir {

class ModelFamily;

struct ModelOptions {
  int max_num_tokens = 2048;  // rows in one forward (max_num_batched_tokens)
  int max_num_logits = 256;   // rows of logits in one forward (max_num_seqs)
  // This model is rank tp.rank's shard (tensor_parallel.h); its forward pass all-reduces and
  // gathers over tp.comm, or over the backend's device communicator when it has one
  // (Backend::device_group_size(); then also at tp.size 1), so every rank of the group must run
  // the same batches in step.
  TensorParallelGroup tp;
  // This model is stage pp.rank of a pipeline (pipeline_parallel.h): it holds only that stage's
  // layers (the embedding on the first stage, the final norm and lm_head on the last) and their
  // KV cache; tp is then the stage's own tensor-parallel group. forward() receives the hidden
  // states from the stage before and sends them to the one after, micro-batch by micro-batch, and
  // the logits every rank returns are the last stage's. layer_partition: VLLM_PP_LAYER_PARTITION.
  PipelineParallelGroup pp;
  std::string layer_partition;
};

class DecoderModel {
 public:
  static StatusOr<std::unique_ptr<DecoderModel>> create(const ModelConfig& config, const WeightSource& weights,
                                                        Backend& backend, const ModelOptions& opts);
  ~DecoderModel();

  // The shard's config under tensor parallelism (its heads, its MLP rows; the full vocabulary).
  // Under pipeline parallelism num_layers stays the whole model's; the stage runs stage_layers().
  const ModelConfig& config() const { return config_; }
  LayerRange stage_layers() const { return stage_; }
  size_t kv_cache_bytes_per_block(int block_size) const;
  StatusOr<KvCache> allocate_kv_cache(int num_blocks, int block_size);

  // Runs the batch; writes float32 logits [batch.num_logits, vocab_size] to `logits` (host).
  Status forward(const ForwardBatch& batch, KvCache& cache, float* logits);
  // The same in two parts, for callers that want more logits rows than fit in one call (prompt
  // logprobs): run_layers keeps the final hidden states, compute_logits projects chosen rows
  // (at most max_num_logits per call) and may be called several times.
  Status run_layers(const ForwardBatch& batch, KvCache& cache);
  Status compute_logits(const int32_t* rows, int num_rows, float* logits);
  // The same, leaving the float32 logits [num_rows, vocab_size] on the backend's device (valid
  // until the next call): for on-device sampling, which reads back only token ids.
  StatusOr<Tensor> compute_logits_on_device(const int32_t* rows, int num_rows);
  int max_num_logits() const { return opts_.max_num_logits; }
  Backend& backend() { return backend_; }
  // Whether a batch may carry input_id_sources (ids the previous step sampled, still on the device).
  bool feeds_sampled_tokens() const;

  // EAGLE-3 (model/draft_heads/eagle3_head.h): from now on every run_layers keeps the residual stream entering
  // each of `layers` (vLLM's aux hidden states: layer i's input, i.e. layer i - 1's output; sorted,
  // distinct, in [0, num_layers)). Whole models only (no tensor or pipeline parallelism).
  Status capture_aux_hidden_states(const std::vector<int>& layers);
  // [num captured layers * max_num_tokens, hidden]: captured layer j (ascending order) of the last
  // run_layers at rows [j * max_num_tokens, j * max_num_tokens + its num_tokens). Valid until the
  // next run_layers; empty (data == nullptr) when nothing is captured.
  const Tensor& aux_hidden_states() const { return aux_; }
  int max_num_tokens() const { return opts_.max_num_tokens; }
  // EAGLE-1/2 (model/draft_heads/eagle_head.h): from now on every run_layers also keeps the final-normed
  // hidden state of each token (the vector lm_head reads: what vLLM's runner hands its "eagle"
  // drafter as target_hidden_states, since vLLM's LlamaModel.forward returns self.norm(...)).
  // Whole models only (no tensor or pipeline parallelism).
  Status capture_final_hidden_states();
  // [max_num_tokens, hidden]: token i of the last run_layers at row i (i < its num_tokens).
  // Valid until the next run_layers; empty (data == nullptr) when nothing is captured.
  const Tensor& final_hidden_states() const { return final_hidden_; }
  // lm_head as bound ([vocab_size, hidden]; the embedding when tied; unsharded models only): an
  // EAGLE-1 head projects its output with the target's.
  const Tensor& lm_head() const { return lm_head_; }
  // The token embedding table as bound ([vocab_size, hidden]; unsharded models only) and the
  // scale its rows are multiplied by: a speculative head without its own embeds with these.
  const Tensor& token_embedding() const { return embed_; }

 private:
  struct Layer;
  DecoderModel(const ModelConfig& config, Backend& backend, const ModelOptions& opts);
  Status bind_weights(const WeightSource& weights, const ModelFamily& family);
  Status allocate_workspace();
  // Tensor parallelism: the vocabulary shard padded with zero rows (rows >= its real ones), so an
  // id outside the shard embeds to zeros and every rank's logits have the same width.
  StatusOr<Tensor> padded_vocab_rows(const Tensor& rows, int64_t padded_rows);
  Status all_reduce(Tensor& t);  // sums t over the tensor-parallel group, in place
  // Embeds the batch's tokens into rows [row, row + batch.num_tokens) of the residual stream.
  Status embed(const ForwardBatch& batch, int row);
  // This stage's layers over rows [row, row + batch.num_tokens) of the residual stream.
  Status run_stage_layers(const ForwardBatch& batch, int row, KvCache& cache);
  // Pipeline parallelism: the batch in micro-batches, received from the stage before (or
  // embedded) and sent on to the stage after.
  Status run_pipeline_stage(const ForwardBatch& batch, KvCache& cache);
  bool first_stage() const { return opts_.pp.rank == 0; }
  bool last_stage() const { return opts_.pp.rank == opts_.pp.size - 1; }
  int world_rank(int pp_rank) const;  // the rank of this tensor-parallel rank in stage pp_rank
  Status gather_logits(const Tensor& local, int num_rows, Tensor& out);
  // Whether the forward pass runs the tensor-parallel path (vocabulary shards, collectives): the
  // group has several ranks, or the backend's device communicator runs it over one.
  bool sharded() const { return opts_.tp.size > 1 || device_collectives_; }
  // The final norm and lm_head over `rows` of the residual stream, into out [num_rows, vocab].
  Status project_logits(const int32_t* rows, int num_rows, Tensor& out);

  ModelConfig config_;
  ModelConfig full_config_;  // the whole model's (== config_ without tensor parallelism)
  VocabShard vocab_;         // this rank's vocabulary rows (all of them without tensor parallelism)
  LayerRange stage_;         // this pipeline stage's layers (all of them without pipeline parallelism)
  Backend& backend_;
  ModelOptions opts_;
  std::vector<Layer> layers_;
  Tensor embed_, final_norm_, lm_head_;
  std::unique_ptr<RopeTables> rope_;  // stable address: blocks keep a pointer
  std::vector<std::unique_ptr<Buffer>> owned_;  // uploaded weights and converted norm vectors
  struct Workspace;
  std::unique_ptr<Workspace> ws_;
  int last_num_tokens_ = 0;
  // capture_aux_hidden_states: the layers, their rows, and the rows 0..max_num_tokens-1 that copy
  // x into them (gather_rows is every backend's row copy).
  std::vector<int> aux_layers_;
  Tensor aux_;
  std::vector<int32_t> aux_identity_rows_;
  Tensor final_hidden_;  // capture_final_hidden_states: [max_num_tokens, hidden]
  float eps_;
  bool device_collectives_ = false;  // the backend's device communicator carries the collectives
};

}  // namespace kvasir
