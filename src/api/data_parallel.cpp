#include "api/data_parallel.h"

#include <algorithm>

namespace kvasir {

EngineArgs data_parallel_replica_args(const EngineArgs& args, int local_replica, int hardware_threads) {
  EngineArgs r = args;
  const int d = std::max(1, args.data_parallel.local_size(args.data_parallel_size));
  if (d == 1) return r;
  const int total = args.num_threads > 0 ? args.num_threads : std::max(1, hardware_threads);
  r.num_threads = std::max(1, total / d + (local_replica < total % d ? 1 : 0));
  return r;
}

}  // namespace kvasir
