// The processes of a tensor-parallel group on one host (--tensor-parallel-size N): rank 0 (the
// process that serves) starts ranks 1..N-1 by running its own program again with its own
// arguments and KVASIR_TP_RANK / KVASIR_TP_GROUP in their environment, then every rank joins the
// shared-memory communicator of the group. The entry points call `tensor_parallel_worker_rank()`
// first and, in a worker, `run_tensor_parallel_worker` instead of serving. What the ranks must
// agree on (the KV block count) is agreed here too. Knows no engine and no HTTP.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "setup/engine_args.h"

namespace kvasir {

struct TensorParallelProcesses {
  std::unique_ptr<dist::Communicator> comm;
  std::vector<pid_t> workers;  // rank 0 only: ranks 1..N-1
  // Rank 0: waits for the workers to exit (they stop when rank 0's BroadcastingWorker says so,
  // or fail when the group breaks), killing those still there after a few seconds.
  ~TensorParallelProcesses();
};

// This process's rank when it is a worker started by start_tensor_parallel_group; nullopt in
// the process that serves.
std::optional<int> tensor_parallel_worker_rank();

// Rank 0: starts the workers and joins the group. A worker that exits before joining is named.
StatusOr<std::unique_ptr<TensorParallelProcesses>> start_tensor_parallel_group(int size);
// A worker: joins the group as `rank`.
StatusOr<std::unique_ptr<TensorParallelProcesses>> join_tensor_parallel_group(int size, int rank);

// The smallest of the ranks' KV block counts (each rank plans for its own shard).
StatusOr<int> agree_num_kv_blocks(dist::Communicator& comm, int mine);

// A worker's whole life: load its shard, size its KV cache as rank 0 does, run every step rank 0
// broadcasts until it stops the group. Returns the process exit code (0: stopped by rank 0).
int run_tensor_parallel_worker(const EngineArgs& args, int rank);

}  // namespace kvasir
