// Which GPU a rank of a tensor/pipeline-parallel group drives: GPU `local_rank` of its own host
// (vLLM's cuda:local_rank), so that rank 2 of a group whose host runs ranks 2 and 3 takes GPU 0,
// not GPU 2. The one place a device ordinal is chosen; plain arithmetic, no CUDA.
#pragma once

#include "common/status.h"

namespace kvasir {

// Where a rank sits on its host (api/launch_plan.h says it for each launcher).
struct RankPlacement {
  int local_rank = 0;     // index among the group's ranks on this host, ascending rank
  int ranks_on_host = 1;  // the group's ranks on this host
};

// The device ordinal for `placement` on a host with `device_count` visible GPUs; an error naming
// both counts when the host runs more ranks than it has GPUs (two ranks never share one).
StatusOr<int> gpu_for_rank(const RankPlacement& placement, int device_count);

}  // namespace kvasir
