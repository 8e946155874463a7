// Where this process stands in its tensor-parallel group, from the launch flags (setup/launch_args.h)
// and the environment: its rank, which ranks of its node it starts itself, and how the group meets
// (shared memory on one self-launched host; TCP at --master-addr:--master-port across nodes or
// under mpirun). Decides only; starting and joining are api/tensor_parallel_group.h's.
//
// Launchers: one host (rank 0 starts ranks 1..N-1); --nnodes M (each node's launched process is
// the first of its N/M ranks and starts the rest; node 0's is rank 0); mpirun (Open MPI's
// OMPI_COMM_WORLD_* variables: each MPI rank is one rank, nobody starts anyone; its LOCAL_RANK and
// LOCAL_SIZE place it on its host). A process started
// by a launcher has KVASIR_TP_RANK and KVASIR_TP_GROUP set.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.h"
#include "setup/engine_args.h"

namespace kvasir {

struct LaunchPlan {
  enum class Launcher { kNone, kOneHost, kNodes, kMpirun };
  Launcher launcher = Launcher::kNone;  // kNone: no group (--tensor-parallel-size 1)
  int world_size = 1;
  int rank = 0;                // 0 serves (engine, scheduler, API); the others only run steps
  bool started_by_launcher = false;  // a worker started by another rank's process on its node
  int num_ranks_to_start = 0;  // ranks rank+1 .. rank+num_ranks_to_start, started by this process
  bool tcp = false;            // TCP rendezvous at master_addr:master_port, else shared memory
  std::string master_addr;
  int master_port = 0;
  // This rank's place on its host: its index among the group's ranks there (ascending rank) and
  // how many there are. Picks its GPU (setup/rank_device.h): GPU local_rank, never GPU rank.
  int local_rank = 0;
  int ranks_on_host = 1;
  std::string group_id;        // a started worker's shared-memory group (from KVASIR_TP_GROUP)
  int64_t busy_wait_us = 0;    // shared memory: ShmCommunicatorOptions::busy_wait_us

  bool is_worker() const { return rank != 0; }
};

// getenv, or a table in tests.
using EnvLookup = std::function<const char*(const char*)>;

// Refuses what does not fit together: mpirun's world size other than --tensor-parallel-size,
// --nnodes or --node-rank under mpirun (mpirun places the ranks), --headless under mpirun (rank 0
// serves, the others are headless anyway), --master-addr or --headless without --nnodes > 1 or
// mpirun, mpirun across hosts without --master-addr.
StatusOr<LaunchPlan> plan_launch(const EngineArgs& args, const EnvLookup& env);
StatusOr<LaunchPlan> plan_launch(const EngineArgs& args);  // this process's environment

}  // namespace kvasir
