// kvasir::LLM: the offline batch API, like vLLM's `LLM`. Loads a model (.gguf or HF directory),
// starts an engine, and generates for many prompts at once with continuous batching; results
// come back in input order. Thread-compatible: one generate() call at a time per LLM.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "setup/engine_args.h"
#include "common/status.h"
#include "core/sampling_params.h"
#include "engine/request_output.h"

namespace kvasir {

struct LoadedModel;
class Engine;
class EngineGroup;

struct PromptInput {
  std::string text;                      // used when token_ids is empty
  std::vector<int32_t> token_ids;
  std::optional<SamplingParams> params;  // per-prompt override
};

struct CompletionResult {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<PositionLogprobs> logprobs;
  std::string finish_reason;
  std::optional<int32_t> stop_reason_token;
  std::optional<std::string> stop_reason_str;
};

struct GenerationResult {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<PositionLogprobs> prompt_logprobs;
  std::vector<CompletionResult> outputs;  // n of them
  std::string error;                      // non-empty when the request failed
  int32_t num_cached_tokens = 0;
};

struct TensorParallelProcesses;
class RemoteReplicaLink;
namespace dist {
class Communicator;
}
struct KvCache;
struct LoadedDraftModel;
struct LoadedEagleHead;

class LLM {
 public:
  static StatusOr<std::unique_ptr<LLM>> create(const EngineArgs& args);
  ~LLM();

  // Runs every prompt to completion. `on_progress(done, total)` is called from this thread.
  StatusOr<std::vector<GenerationResult>> generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                                   const std::function<void(size_t, size_t)>& on_progress = {});

  // Replica 0's model (every data-parallel replica loads the same one). With
  // --distributed-executor-backend mp the model runs in worker processes: `backend` and `model`
  // are null here (tokenizer, config, EOS ids and generation defaults are set).
  const LoadedModel& model() const { return *replicas_.front().model; }
  // The engine; with --data-parallel-size > 1, replica 0's (engines() routes between them).
  Engine& engine();
  // Every replica behind one front (one with --data-parallel-size 1).
  EngineGroup& engines() { return *engines_; }
  int num_kv_blocks() const { return num_kv_blocks_; }
  int max_model_len() const { return max_model_len_; }
  // Whether the engine loop keeps a step in flight (EngineArgs::async_scheduling_on, resolved).
  bool async_scheduling() const { return async_scheduling_; }
  // Whether a data-parallel replica on another node lost its link to this one (its node died):
  // the replica cannot step again (api/remote_replica.h).
  bool lost_remote_replica() const;

 private:
  LLM() = default;
  // Replicas --data-parallel-size-local .. --data-parallel-size - 1, on other nodes.
  Status add_remote_replicas(const EngineArgs& args, std::vector<std::unique_ptr<Engine>>& engines);
  // --pipeline-parallel-size and --tensor-parallel-size both > 1: rank 0's stage's own
  // tensor-parallel group; outlives the replicas' models, which use it.
  std::unique_ptr<dist::Communicator> stage_comm_;
  // What each data-parallel replica's engine runs on; outlives engines_.
  struct Replica {
    std::unique_ptr<LoadedModel> model;
    std::unique_ptr<KvCache> cache;  // the runner keeps a reference (null under mp: no model here)
    // Speculative "draft_model": the draft and its own KV cache, which the runner's proposer uses.
    std::unique_ptr<LoadedDraftModel> draft;
    // Speculative "eagle" / "eagle3": the head, its weights and its KV cache, which the runner's
    // proposer uses.
    std::unique_ptr<LoadedEagleHead> eagle_head;
  };
  std::vector<Replica> replicas_;
  // More than one rank (tensor x pipeline parallel) or --distributed-executor-backend mp: the
  // whole group's communicator and the worker processes; outlives engines_, whose
  // BroadcastingWorker stops the workers when it goes.
  std::unique_ptr<TensorParallelProcesses> tp_;
  // Data-parallel replicas on other nodes (api/remote_replica.h): each one's step group, in
  // replica order; outlives engines_, whose BroadcastingWorkers stop those replicas when they go.
  std::vector<std::unique_ptr<RemoteReplicaLink>> remote_replica_links_;
  std::unique_ptr<EngineGroup> engines_;
  int num_kv_blocks_ = 0;
  int max_model_len_ = 0;
  bool async_scheduling_ = false;
  uint64_t next_id_ = 0;
};

}  // namespace kvasir
