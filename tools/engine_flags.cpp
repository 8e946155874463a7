#include "engine_flags.h"

#include <cstdlib>

#include "setup/loaded_model.h"

namespace kvasir {

void add_engine_flags(std::set<std::string>& v, std::set<std::string>& b) {
  for (const char* f : {"model", "device", "threads", "max-num-seqs", "max-num-batched-tokens", "block-size",
                        "kv-cache-memory", "max-model-len", "seed", "max-logprobs", "scheduling-policy",
                        "long-prefill-token-threshold", "max-num-partial-prefills",
                        "max-long-partial-prefills", "load-format", "gpu-memory-utilization", "kv-cache-dtype", "dtype",
                        "quantization", "tokenizer", "structured-outputs-config", "tensor-parallel-size",
                        "pipeline-parallel-size", "data-parallel-size", "data-parallel-size-local",
                        "data-parallel-start-rank", "data-parallel-address", "data-parallel-rpc-port", "speculative-config", "nnodes",
                        "node-rank", "master-addr", "master-port", "distributed-executor-backend"}) {
    v.insert(f);
  }
  for (const char* f : {"enable-prefix-caching", "exact-matmul", "enforce-eager", "disable-async-output-proc",
                        "async-scheduling", "no-async-scheduling", "enable-expert-parallel", "headless",
                        "calculate-kv-scales"}) {
    b.insert(f);
  }
}

std::string engine_flags_help() {
  return "  --model PATH                 .gguf file or HF directory (default: SmolLM2-135M-Instruct Q4_1)\n"
         "  --tokenizer PATH             tokenizer from another .gguf / HF directory (e.g. a real\n"
         "                               vocabulary for --load-format dummy; default: the model's)\n"
         "  --device auto|cpu|cuda       (default auto)\n"
         "  --threads N                  CPU threads (default: all cores)\n"
         "  --max-num-seqs N             (default 256)\n"
         "  --max-num-batched-tokens N   tokens in one step (default 2048 on a GPU, 512 on the CPU)\n"
         "  --block-size N               KV block size in tokens (default 16)\n"
         "  --kv-cache-memory BYTES      KV cache size on the CPU, e.g. 4GiB (default 2GiB)\n"
         "  --kv-cache-dtype auto|float16|float32|bfloat16|fp8|fp8_e4m3|fp8_e5m2\n"
         "                               KV cache elements (auto: float32 on CPU, bfloat16 on CUDA;\n"
         "                               float16 on CPU halves KV memory and decode attention traffic;\n"
         "                               fp8 = fp8_e4m3 and fp8_e5m2 keep 8-bit codes with the\n"
         "                               checkpoint's per-layer k/v scales, else 1.0: CPU only so far)\n"
         "  --dtype auto|bfloat16|float16|float32\n"
         "                               weight element type (auto: as stored; CPU: dense matrices of an\n"
         "                               HF directory converted at load, e.g. float32 -> bfloat16 as\n"
         "                               vLLM-CPU runs them; CUDA: auto or bfloat16)\n"
         "  --quantization METHOD        fp8: quantize an unquantized HF checkpoint's linear weights to FP8\n"
         "                               at load (per-channel e4m3, as vLLM). Quantized checkpoints (fp8,\n"
         "                               compressed-tensors, gptq, awq) are read from their config.json;\n"
         "                               the flag may name their own method (or gptq_marlin / awq_marlin),\n"
         "                               never another\n"
         "  --max-model-len N            (default: the model's context length, capped to the KV cache)\n"
         "  --seed N                     engine seed for unseeded requests (default 0)\n"
         "  --[no-]enable-prefix-caching (default on)\n"
         "  --max-logprobs N             (default 20)\n"
         "  --scheduling-policy fcfs|priority\n"
         "  --long-prefill-token-threshold N   a prefill chunk's most tokens; past it a prompt is long\n"
         "  --max-num-partial-prefills N  most prompts one step leaves partially prefilled, the budget\n"
         "                               split between them (default 1: no limit, as vLLM)\n"
         "  --max-long-partial-prefills M most of them longer than the threshold (default 1; <= N);\n"
         "                               with N > 1 the threshold defaults to 4% of --max-model-len\n"
         "  --exact-matmul               float32 activations in quantized matmuls (slower, reference accuracy)\n"
         "  --load-format auto|dummy     dummy: random weights, --model is an HF config.json (default auto)\n"
         "  --gpu-memory-utilization F   GPU memory share for weights, activations and KV cache (default 0.9)\n"
         "  --enforce-eager              CUDA: launch kernels one by one, no CUDA graphs\n"
         "  --disable-async-output-proc  detokenize in lock step with the forward pass (measures the overlap)\n"
         "  --async-scheduling           schedule the next step while the current one runs (default: on\n"
         "                               for a model on a GPU without speculative decoding, else off)\n"
         "  --no-async-scheduling        keep the engine loop in lock step with the device\n"
         "  Parallelism (vLLM's flags and meanings; CPU: over shared memory between the ranks of one\n"
         "  host, over TCP between hosts or under mpirun; CUDA: ranks of one host only, rank r on GPU r,\n"
         "  over a custom all-reduce and NCCL):\n"
         "  --tensor-parallel-size N     split every layer over N ranks, one process each: attention heads\n"
         "                               and MLP rows (MoE: every expert's rows) per rank, KV heads split or\n"
         "                               replicated, vocabulary split; one all-reduce after attention and\n"
         "                               one after the MLP (default 1). Every family: Llama, Mistral,\n"
         "                               Qwen2/3, Gemma 2/3, Phi-3, Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3\n"
         "                               (MLA heads split, the latent cache on every rank), GPT-OSS (these\n"
         "                               two tested on the CPU only)\n"
         "  --distributed-executor-backend mp|uni\n"
         "                               mp: every model rank in its own worker process, this process keeps\n"
         "                               the server, engine and scheduler only (any TP size); uni: the model\n"
         "                               in this process (TP 1 only). Unset: rank 0 in this process, ranks\n"
         "                               1..N-1 as worker processes (uni at TP 1). ray, external_launcher:\n"
         "                               not supported\n"
         "  --nnodes M                   spread the --tensor-parallel-size ranks over M hosts, N/M each\n"
         "                               (M must divide N); run the same command on every host with its\n"
         "                               --node-rank; each starts its own ranks (default 1)\n"
         "  --node-rank K                this host's index in [0, M): node 0 holds rank 0 and serves, node K\n"
         "                               runs ranks K*N/M .. (K+1)*N/M-1 without an API server (default 0)\n"
         "  --master-addr ADDR           node 0's address; rank 0 listens there (needed with M > 1, and\n"
         "                               under mpirun across hosts; default 127.0.0.1 under mpirun on one host)\n"
         "  --master-port P              rank 0's rendezvous port on ADDR (default 29501)\n"
         "  --headless                   a node other than node 0: no API server, only its ranks' steps\n"
         "                               (implied by --node-rank > 0)\n"
         "  Under Open MPI's mpirun (OMPI_COMM_WORLD_* set) each MPI rank is one tensor-parallel rank:\n"
         "  mpirun -np N kvasir serve ... --tensor-parallel-size N; MPI rank 0 serves, nobody is started\n"
         "  by kvasir, and the ranks meet over TCP at --master-addr:--master-port\n"
         "  --pipeline-parallel-size N   split the layers into N contiguous stages (vLLM's split, or\n"
         "                               $VLLM_PP_LAYER_PARTITION \"a,b,..\"), each of --tensor-parallel-size\n"
         "                               ranks (N x TP processes); a stage loads only its layers' weights\n"
         "                               and KV cache; each step runs as up to N micro-batches of whole\n"
         "                               sequences so the stages overlap; the last stage's logits go to\n"
         "                               every rank (default 1). Every family (DeepSeek and GPT-OSS with\n"
         "                               --tensor-parallel-size 1); fewer layers than N is refused\n"
         "  --data-parallel-size N       N whole engine replicas behind one front (default 1):\n"
         "                               each has its own scheduler, KV cache and prefix cache; a request goes\n"
         "                               to the replica caching the longest prefix of its prompt, else to the\n"
         "                               least loaded. CPU only; the replicas split --threads (default all\n"
         "                               cores); --kv-cache-memory and --max-num-seqs are per replica, as in\n"
         "                               vLLM. /metrics adds per-replica engine=\"i\" series beside the totals.\n"
         "                               Not with --tensor-parallel-size, --pipeline-parallel-size > 1,\n"
         "                               --distributed-executor-backend mp or --nnodes\n"
         "  Data-parallel replicas across nodes (vLLM's flags; CPU only): node 0 runs the API server, the\n"
         "  routing and every replica's scheduler; another node's replica runs its forward passes there,\n"
         "  reached over TCP. E.g. node 0: --data-parallel-size 2 --data-parallel-size-local 1\n"
         "  --data-parallel-address A; node 1: the same plus --headless --data-parallel-start-rank 1\n"
         "  --data-parallel-size-local N  replicas on this node (default: --data-parallel-size); node 0 runs\n"
         "                               0 .. N-1 (0: an API-only node 0)\n"
         "  --data-parallel-start-rank S  a --headless node's first replica: it runs S .. S+N-1 (default 0)\n"
         "  --data-parallel-address A    node 0's address; it listens there for the other nodes' replicas\n"
         "                               (default 127.0.0.1)\n"
         "  --data-parallel-rpc-port P   replica i meets node 0 at A:P+i (default 29550)\n"
         "  --headless                   with --data-parallel-size: a node that runs only its replicas'\n"
         "                               forward passes, no API server\n"
         "  --enable-expert-parallel     MoE models: each of the N ranks holds whole routed experts (rank r\n"
         "                               the r-th contiguous share) instead of every expert's slice; routing\n"
         "                               on every rank, one all-reduce after the MoE layer; attention and\n"
         "                               shared experts stay split (CUDA: tested at the op level, one GPU);\n"
         "                               refused for a model without experts\n"
         "  --structured-outputs-config JSON\n"
         "                               {\"backend\": \"xgrammar\"|\"auto\", \"disable_any_whitespace\": bool,\n"
         "                               \"disable_additional_properties\": bool, \"enable_in_reasoning\": bool}\n"
         "  --speculative-config JSON    speculative decoding, vLLM's keys: {\"method\": \"ngram\"|\"suffix\"|\n"
         "                               \"draft_model\"|\"eagle\"|\"eagle3\", \"num_speculative_tokens\": N, \"prompt_lookup_min\": N,\n"
         "                               \"prompt_lookup_max\": N, \"suffix_decoding_max_tree_depth\": N, ...,\n"
         "                               \"model\": PATH (draft_model: a .gguf / HF directory with the target's\n"
         "                               vocabulary; 'model' alone implies draft_model; eagle / eagle3: the EAGLE-1/2\n"
         "                               / EAGLE-3 head's HF directory, or its config.json with --load-format dummy),\n"
         "                               \"draft_tensor_parallel_size\": 1}\n";
}

StatusOr<EngineArgs> engine_args_from(const Args& a) {
  EngineArgs e;
  e.model = a.get("model");
  if (e.model.empty() && !a.positionals().empty()) e.model = a.positionals()[0];
  e.device = a.get("device", "auto");
  KVASIR_ASSIGN_OR_RETURN(int64_t threads, a.get_int("threads", 0));
  KVASIR_ASSIGN_OR_RETURN(int64_t seqs, a.get_int("max-num-seqs", e.max_num_seqs));
  KVASIR_ASSIGN_OR_RETURN(int64_t tokens, a.get_int("max-num-batched-tokens",
                                                    default_max_num_batched_tokens(device_flag_selects_gpu(e.device))));
  KVASIR_ASSIGN_OR_RETURN(int64_t bs, a.get_int("block-size", e.block_size));
  KVASIR_ASSIGN_OR_RETURN(int64_t seed, a.get_int("seed", 0));
  KVASIR_ASSIGN_OR_RETURN(int64_t max_lp, a.get_int("max-logprobs", e.max_logprobs));
  if (threads > 4096 || seqs > 1 << 20 || tokens > 1 << 24 || bs > 1 << 20 || max_lp > 1 << 20) {
    return invalid_argument("an engine flag is out of range");
  }
  e.num_threads = static_cast<int>(threads);
  e.max_num_seqs = static_cast<int>(seqs);
  e.max_num_batched_tokens = static_cast<int>(tokens);
  e.block_size = static_cast<int>(bs);
  e.seed = static_cast<uint64_t>(seed);
  e.max_logprobs = static_cast<int>(max_lp);
  if (a.has("kv-cache-memory")) {
    KVASIR_ASSIGN_OR_RETURN(e.kv_cache_memory, parse_memory_size(a.get("kv-cache-memory")));
  }
  if (a.has("max-model-len")) {
    KVASIR_ASSIGN_OR_RETURN(int64_t mml, a.get_int("max-model-len", 0));
    if (mml < 1 || mml > kMaxModelLenLimit) return invalid_argument("--max-model-len out of range");
    e.max_model_len = static_cast<int>(mml);
  }
  if (a.has("long-prefill-token-threshold")) {
    KVASIR_ASSIGN_OR_RETURN(int64_t t, a.get_int("long-prefill-token-threshold", 0));
    if (t < 1 || t > 1 << 24) return invalid_argument("--long-prefill-token-threshold out of range");
    e.long_prefill_token_threshold = static_cast<int>(t);
  }
  KVASIR_ASSIGN_OR_RETURN(int64_t partial, a.get_int("max-num-partial-prefills", e.max_num_partial_prefills));
  KVASIR_ASSIGN_OR_RETURN(int64_t long_partial, a.get_int("max-long-partial-prefills", e.max_long_partial_prefills));
  // The scheduler config checks vLLM's rules between them; here only what fits an int.
  if (partial < 0 || partial > 1 << 20 || long_partial < 0 || long_partial > 1 << 20) {
    return invalid_argument("--max-num-partial-prefills and --max-long-partial-prefills must be in [1, 1048576]");
  }
  e.max_num_partial_prefills = static_cast<int>(partial);
  e.max_long_partial_prefills = static_cast<int>(long_partial);
  e.enable_prefix_caching = a.get_bool("enable-prefix-caching", true);
  e.exact_matmul = a.get_bool("exact-matmul", false);
  e.kv_cache_dtype = a.get("kv-cache-dtype", "auto");
  // FP8 KV scales from the first batch's K and V (EngineArgs::calculate_kv_scales; make_backend
  // refuses it without an FP8 cache, and on CUDA).
  e.calculate_kv_scales = a.get_bool("calculate-kv-scales", false);
  e.dtype = a.get("dtype", "auto");
  e.quantization = a.get("quantization");
  e.scheduling_policy = a.get("scheduling-policy", "fcfs");
  e.load_format = a.get("load-format", "auto");
  e.tokenizer = a.get("tokenizer");
  e.enforce_eager = a.get_bool("enforce-eager", false);
  e.disable_async_output_proc = a.get_bool("disable-async-output-proc", false);
  if (a.has("async-scheduling") && a.has("no-async-scheduling")) {
    return invalid_argument("--async-scheduling and --no-async-scheduling contradict each other");
  }
  if (a.has("async-scheduling")) e.async_scheduling = a.get_bool("async-scheduling", true);
  if (a.has("no-async-scheduling")) e.async_scheduling = !a.get_bool("no-async-scheduling", true);
  KVASIR_ASSIGN_OR_RETURN(int64_t tp, a.get_int("tensor-parallel-size", 1));
  if (tp < 1 || tp > 64) return invalid_argument("--tensor-parallel-size must be in [1, 64]");
  e.tensor_parallel_size = static_cast<int>(tp);
  e.distributed_executor_backend = a.get("distributed-executor-backend");
  KVASIR_ASSIGN_OR_RETURN(int64_t nnodes, a.get_int("nnodes", 1));
  KVASIR_ASSIGN_OR_RETURN(int64_t node_rank, a.get_int("node-rank", 0));
  KVASIR_ASSIGN_OR_RETURN(int64_t master_port, a.get_int("master-port", LaunchArgs::kDefaultMasterPort));
  if (nnodes < 1 || nnodes > 1024) return invalid_argument("--nnodes must be in [1, 1024]");
  if (node_rank < 0 || node_rank > 1024) return invalid_argument("--node-rank must be in [0, --nnodes)");
  if (master_port < 1 || master_port > 65535) return invalid_argument("--master-port must be in [1, 65535]");
  e.launch.nnodes = static_cast<int>(nnodes);
  e.launch.node_rank = static_cast<int>(node_rank);
  e.launch.master_port = static_cast<int>(master_port);
  e.launch.master_port_given = a.has("master-port");
  if (a.has("master-addr") && a.get("master-addr").empty()) return invalid_argument("--master-addr must not be empty");
  e.launch.master_addr = a.get("master-addr");
  e.launch.headless = a.get_bool("headless", false);
  KVASIR_ASSIGN_OR_RETURN(int64_t pp, a.get_int("pipeline-parallel-size", 1));
  if (pp < 1 || pp > 64) return invalid_argument("--pipeline-parallel-size must be in [1, 64]");
  e.pipeline_parallel_size = static_cast<int>(pp);
  KVASIR_ASSIGN_OR_RETURN(int64_t dp, a.get_int("data-parallel-size", 1));
  if (dp < 1 || dp > 64) return invalid_argument("--data-parallel-size must be in [1, 64]");
  e.data_parallel_size = static_cast<int>(dp);
  if (a.has("data-parallel-size-local")) {
    KVASIR_ASSIGN_OR_RETURN(int64_t local, a.get_int("data-parallel-size-local", 0));
    if (local < 0 || local > 64) return invalid_argument("--data-parallel-size-local must be in [0, 64]");
    e.data_parallel.size_local = static_cast<int>(local);
  }
  KVASIR_ASSIGN_OR_RETURN(int64_t dp_start, a.get_int("data-parallel-start-rank", 0));
  if (dp_start < 0 || dp_start > 64) return invalid_argument("--data-parallel-start-rank must be in [0, 64]");
  e.data_parallel.start_rank = static_cast<int>(dp_start);
  KVASIR_ASSIGN_OR_RETURN(int64_t dp_port, a.get_int("data-parallel-rpc-port", DataParallelArgs::kDefaultRpcPort));
  if (dp_port < 1 || dp_port > 65535) return invalid_argument("--data-parallel-rpc-port must be in [1, 65535]");
  e.data_parallel.rpc_port = static_cast<int>(dp_port);
  e.data_parallel.rpc_port_given = a.has("data-parallel-rpc-port");
  if (a.has("data-parallel-address")) {
    if (a.get("data-parallel-address").empty()) return invalid_argument("--data-parallel-address must not be empty");
    e.data_parallel.address = a.get("data-parallel-address");
    e.data_parallel.address_given = true;
  }
  e.enable_expert_parallel = a.get_bool("enable-expert-parallel", false);
  if (a.has("structured-outputs-config")) {
    KVASIR_ASSIGN_OR_RETURN(e.structured_outputs, parse_structured_outputs_config(a.get("structured-outputs-config")));
  }
  if (a.has("speculative-config")) {
    KVASIR_ASSIGN_OR_RETURN(e.speculative, parse_speculative_config(a.get("speculative-config")));
  }
  if (a.has("gpu-memory-utilization")) {
    const std::string u = a.get("gpu-memory-utilization");
    char* end = nullptr;
    e.gpu_memory_utilization = std::strtod(u.c_str(), &end);
    if (end == u.c_str() || *end != '\0') return invalid_argument("--gpu-memory-utilization must be a number");
  }
  KVASIR_RETURN_IF_ERROR(e.validate());
  return e;
}

}  // namespace kvasir
