#include "engine/replica_choice.h"

namespace kvasir {

int choose_replica(std::span<const ReplicaState> replicas, size_t start) {
  const size_t n = replicas.size();
  int best = -1;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    const ReplicaState& r = replicas[i];
    if (r.dead) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const ReplicaState& b = replicas[static_cast<size_t>(best)];
    // The longer cached prefix wins; between equal ones (none cached included), the lighter load.
    // Strict comparisons keep the first in round-robin order on a tie.
    if (r.cached_prefix_blocks > b.cached_prefix_blocks ||
        (r.cached_prefix_blocks == b.cached_prefix_blocks && r.num_unfinished < b.num_unfinished)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace kvasir
