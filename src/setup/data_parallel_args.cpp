#include "setup/data_parallel_args.h"

namespace kvasir {

Status DataParallelArgs::validate(int data_parallel_size, bool headless) const {
  const int d = data_parallel_size;
  const std::string ds = "--data-parallel-size " + std::to_string(d);
  if (d <= 1) {
    // One replica is node 0's alone: a flag that places replicas would be silently meaningless.
    const char* given = size_local.has_value() ? "--data-parallel-size-local"
                        : start_rank != 0      ? "--data-parallel-start-rank"
                        : address_given        ? "--data-parallel-address"
                        : rpc_port_given       ? "--data-parallel-rpc-port"
                                               : nullptr;
    if (given != nullptr)
      return invalid_argument(std::string(given) + " needs --data-parallel-size > 1 (it places data-parallel "
                              "replicas on nodes)");
    return Status();
  }
  const int local = local_size(d);
  if (local < 0 || local > d)
    return invalid_argument("--data-parallel-size-local " + std::to_string(local) + " is not in [0, " +
                            std::to_string(d) + "] for " + ds);
  if (start_rank < 0 || start_rank >= d)
    return invalid_argument("--data-parallel-start-rank " + std::to_string(start_rank) + " is not in [0, " +
                            std::to_string(d) + ") for " + ds);
  if (start_rank + local > d)
    return invalid_argument("--data-parallel-start-rank " + std::to_string(start_rank) +
                            " + --data-parallel-size-local " + std::to_string(local) + " is past " + ds +
                            ": this node's replicas are start .. start + local - 1");
  if (rpc_port < 1 || rpc_port + d - 1 > 65535)
    return invalid_argument("--data-parallel-rpc-port " + std::to_string(rpc_port) + ": replica i meets node 0 at "
                            "port + i, so port + " + std::to_string(d - 1) + " must be at most 65535");
  if (address.empty()) return invalid_argument("--data-parallel-address must not be empty");
  if (headless) {
    if (local < 1)
      return invalid_argument("--headless with --data-parallel-size-local " + std::to_string(local) +
                              ": a headless node runs at least one replica");
    if (start_rank == 0)
      return invalid_argument("--headless with --data-parallel-start-rank 0: replica 0 is node 0's, where the API "
                              "server runs; give this node's first replica (node 0 runs 0 .. its "
                              "--data-parallel-size-local - 1)");
    return Status();
  }
  if (start_rank != 0)
    return invalid_argument("--data-parallel-start-rank " + std::to_string(start_rank) +
                            " without --headless: node 0 (the API server's) runs replicas 0 .. "
                            "--data-parallel-size-local - 1; the start rank is a --headless node's");
  return Status();
}

}  // namespace kvasir
