// How --data-parallel-size D splits one host between D engine replicas on the CPU. Every replica
// is a whole engine in this process (api/llm.cpp builds them, engine/engine_group.h routes to
// them); the compute they share is the host's cores, so the CPU threads (--threads, default all
// cores) are split as evenly as they go, the first T % D replicas one more, never fewer than one.
// Every per-engine knob keeps vLLM's per-engine meaning: --kv-cache-memory (like vLLM's
// VLLM_CPU_KVCACHE_SPACE per engine process, or a GPU's memory per replica), --max-num-seqs and
// --max-num-batched-tokens are each replica's own, so D replicas hold D times one engine's KV.
// Weights are mmap'd once by the page cache; each replica still binds and packs its own copy.
#pragma once

#include "setup/engine_args.h"

namespace kvasir {

// The args replica `replica` (0 <= replica < args.data_parallel_size) is built with.
// hardware_threads: the host's thread count (std::thread::hardware_concurrency()).
EngineArgs data_parallel_replica_args(const EngineArgs& args, int replica, int hardware_threads);

}  // namespace kvasir
