#include "setup/launch_args.h"

namespace kvasir {

Status LaunchArgs::validate(int world_size) const {
  const std::string w = std::to_string(world_size);
  if (nnodes < 1 || nnodes > 1024) return invalid_argument("--nnodes must be in [1, 1024]");
  if (master_port < 1 || master_port > 65535) return invalid_argument("--master-port must be in [1, 65535]");
  if (nnodes == 1) {
    // Under mpirun the ranks come from its environment (api/launch_plan.h), so --master-addr and
    // --headless may still apply; --node-rank never does with one node.
    if (node_rank != 0)
      return invalid_argument("--node-rank " + std::to_string(node_rank) + " needs --nnodes > 1 (one node has rank 0)");
    return Status();
  }
  if (world_size % nnodes != 0)
    return invalid_argument("--nnodes " + std::to_string(nnodes) + " does not divide the world size " + w +
                            " (--tensor-parallel-size): every node runs the same number of ranks");
  if (node_rank < 0 || node_rank >= nnodes)
    return invalid_argument("--node-rank " + std::to_string(node_rank) + " is not in [0, " + std::to_string(nnodes) +
                            ") for --nnodes " + std::to_string(nnodes));
  if (master_addr.empty())
    return invalid_argument("--nnodes " + std::to_string(nnodes) +
                            " needs --master-addr: the address of node 0, where rank 0 listens on --master-port for "
                            "the other nodes' ranks");
  if (headless && node_rank == 0)
    return invalid_argument("--headless on --node-rank 0: node 0 holds rank 0, which runs the engine and the API "
                            "server; only the other nodes are headless");
  return Status();
}

}  // namespace kvasir
