// How --data-parallel-size D splits one host between D engine replicas on the CPU. Every replica
// is a whole engine in this process (api/llm.cpp builds them, engine/engine_group.h routes to
// them); what they share is the machine, so each gets a part of it: the CPU threads (--threads,
// default all cores) split as evenly as they go, the first T % D replicas one more, never fewer
// than one; and --kv-cache-memory split evenly, so D replicas hold the KV memory one engine would.
// Weights are mmap'd once by the page cache; each replica still binds and packs its own copy.
#pragma once

#include "setup/engine_args.h"

namespace kvasir {

// The args replica `replica` (0 <= replica < args.data_parallel_size) is built with.
// hardware_threads: the host's thread count (std::thread::hardware_concurrency()).
EngineArgs data_parallel_replica_args(const EngineArgs& args, int replica, int hardware_threads);

}  // namespace kvasir
