// vLLM's multi-node launch flags (--nnodes, --node-rank, --master-addr, --master-port,
// --headless): how the ranks of a parallel group are spread over hosts and where they meet. Plain
// data; validate() checks the flags against each other and the world size. Where this process
// stands (its rank, which ranks it starts, an mpirun's environment) is api/launch_plan.h's job.
#pragma once

#include <string>

#include "common/status.h"

namespace kvasir {

struct LaunchArgs {
  static constexpr int kDefaultMasterPort = 29501;  // vLLM's

  int nnodes = 1;           // hosts the group's ranks are spread over, world_size / nnodes each
  int node_rank = 0;        // this host's index; node 0 holds rank 0 (engine, scheduler, API server)
  std::string master_addr;  // rank 0's address for the TCP rendezvous; empty: not given
  int master_port = kDefaultMasterPort;
  bool master_port_given = false;  // --master-port on the command line (refused where nothing listens)
  bool headless = false;    // a node without the API server: its ranks only run steps

  // Multi-node flags given with one node are refused; so are a node count that does not divide
  // the world size, a node rank out of range, --headless on node 0 and a missing --master-addr.
  Status validate(int world_size) const;
};

}  // namespace kvasir
