// The processes of a tensor-parallel group, placed as api/launch_plan.h decides: a process starts
// the other ranks of its node by running its own program again with its own arguments and
// KVASIR_TP_RANK / KVASIR_TP_GROUP in their environment (on one host rank 0 starts them all; with
// --nnodes each node's first rank starts its node's; under mpirun nobody starts anyone), then every
// rank joins the group's communicator: shared memory on one host, TCP at --master-addr /
// --master-port across hosts or under mpirun. The entry points make the plan first and, in a
// worker, call `run_tensor_parallel_worker` instead of serving. What the ranks must agree on (the
// KV block count) is agreed here too. Knows no engine and no HTTP.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/launch_plan.h"
#include "common/status.h"
#include "dist/communicator.h"
#include "setup/engine_args.h"

namespace kvasir {

struct TensorParallelProcesses {
  std::unique_ptr<dist::Communicator> comm;
  std::vector<pid_t> workers;  // the ranks this process started (on one host: rank 0 starts 1..N-1)
  bool over_tcp = false;       // --nnodes > 1 or mpirun: ranks may be on other hosts
  // Over TCP: this host's address as the group's ranks reach it (where a subgroup this rank leads
  // listens, dist/tcp_subgroup.h).
  std::string address;
  // This rank's place on its host (LaunchPlan::local_rank / ranks_on_host): its GPU.
  int local_rank = 0;
  int ranks_on_host = 1;
  // Waits for the started workers to exit (they stop when rank 0's BroadcastingWorker says so, or
  // fail when the group breaks), killing those still there after a few seconds.
  ~TensorParallelProcesses();
};

// Starts the ranks this process starts (plan.num_ranks_to_start) and joins the group as plan.rank.
// A started worker that exits before joining a shared-memory group is named at once; a TCP rank 0
// claims --master-port before it starts anyone, so a port in use is named first.
StatusOr<std::unique_ptr<TensorParallelProcesses>> form_tensor_parallel_group(const LaunchPlan& plan);

// The smallest of the ranks' KV block counts (each rank plans for its own shard).
StatusOr<int> agree_num_kv_blocks(dist::Communicator& comm, int mine);

// A worker's whole life (plan.is_worker()): start its node's other ranks if it is their launcher,
// join the group, load its shard, size its KV cache as rank 0 does, run every step rank 0
// broadcasts until it stops the group. Returns the process exit code (0: stopped by rank 0).
int run_tensor_parallel_worker(const EngineArgs& args, const LaunchPlan& plan);

}  // namespace kvasir
