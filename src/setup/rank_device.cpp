#include "setup/rank_device.h"

#include <string>

namespace kvasir {

StatusOr<int> gpu_for_rank(const RankPlacement& p, int device_count) {
  if (p.ranks_on_host < 1 || p.local_rank < 0 || p.local_rank >= p.ranks_on_host)
    return invalid_argument("rank placement: local rank " + std::to_string(p.local_rank) + " of " +
                            std::to_string(p.ranks_on_host) + " ranks on this host is not a place");
  if (p.ranks_on_host > device_count)
    return invalid_argument("this host runs " + std::to_string(p.ranks_on_host) + " ranks of the group but has " +
                            std::to_string(device_count) +
                            " visible CUDA device(s) (one GPU per rank: fewer ranks per node, or more GPUs in "
                            "$CUDA_VISIBLE_DEVICES)");
  return p.local_rank;
}

}  // namespace kvasir
