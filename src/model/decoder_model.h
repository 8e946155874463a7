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
};

class DecoderModel {
 public:
  static StatusOr<std::unique_ptr<DecoderModel>> create(const ModelConfig& config, const WeightSource& weights,
                                                        Backend& backend, const ModelOptions& opts);
  ~DecoderModel();

  // The shard's config under tensor parallelism (its heads, its MLP rows; the full vocabulary).
  const ModelConfig& config() const { return config_; }
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

 private:
  struct Layer;
  DecoderModel(const ModelConfig& config, Backend& backend, const ModelOptions& opts);
  Status bind_weights(const WeightSource& weights, const ModelFamily& family);
  Status allocate_workspace();
  // Tensor parallelism: the vocabulary shard padded with zero rows (rows >= its real ones), so an
  // id outside the shard embeds to zeros and every rank's logits have the same width.
  StatusOr<Tensor> padded_vocab_rows(const Tensor& rows, int64_t padded_rows);
  Status all_reduce(Tensor& t);  // sums t over the tensor-parallel group, in place
  Status gather_logits(const Tensor& local, int num_rows, Tensor& out);
  // Whether the forward pass runs the tensor-parallel path (vocabulary shards, collectives): the
  // group has several ranks, or the backend's device communicator runs it over one.
  bool sharded() const { return opts_.tp.size > 1 || device_collectives_; }

  ModelConfig config_;
  ModelConfig full_config_;  // the whole model's (== config_ without tensor parallelism)
  VocabShard vocab_;         // this rank's vocabulary rows (all of them without tensor parallelism)
  Backend& backend_;
  ModelOptions opts_;
  std::vector<Layer> layers_;
  Tensor embed_, final_norm_, lm_head_;
  std::unique_ptr<RopeTables> rope_;  // stable address: blocks keep a pointer
  std::vector<std::unique_ptr<Buffer>> owned_;  // uploaded weights and converted norm vectors
  struct Workspace;
  std::unique_ptr<Workspace> ws_;
  int last_num_tokens_ = 0;
  float eps_;
  bool device_collectives_ = false;  // the backend's device communicator carries the collectives
};

}  // namespace kvasir
