// How --data-parallel-size D splits one host between its engine replicas on the CPU: the L of
// them this node runs (--data-parallel-size-local, default D). Every local replica is a whole
// engine (api/llm.cpp builds them, engine/engine_group.h routes to them; a headless node's are
// api/remote_replica.h's); the compute they share is the host's cores, so the CPU threads
// (--threads, default all cores) are split as evenly as they go, the first T % L replicas one
// more, never fewer than one.
// Every per-engine knob keeps vLLM's per-engine meaning: --kv-cache-memory (like vLLM's
// VLLM_CPU_KVCACHE_SPACE per engine process, or a GPU's memory per replica), --max-num-seqs and
// --max-num-batched-tokens are each replica's own, so D replicas hold D times one engine's KV.
// Weights are mmap'd once by the page cache; each replica still binds and packs its own copy.
#pragma once

#include "setup/engine_args.h"

namespace kvasir {

// The args this node's replica `local_replica` (0 <= local_replica < L) is built with.
// hardware_threads: the host's thread count (std::thread::hardware_concurrency()).
EngineArgs data_parallel_replica_args(const EngineArgs& args, int local_replica, int hardware_threads);

}  // namespace kvasir
