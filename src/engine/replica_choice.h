// The data-parallel routing rule, as a pure function so it is tested without engines: a request
// goes to the live replica whose prefix cache holds the most of its prompt, else (no replica holds
// any) to the least loaded one; ties go round-robin from `start`, so sequential traffic on an
// idle group still alternates. Knows nothing of requests or engines beyond these numbers.
#pragma once

#include <cstddef>
#include <span>

namespace kvasir {

struct ReplicaState {
  int cached_prefix_blocks = 0;  // leading blocks of the prompt its prefix cache holds now
  int num_unfinished = 0;        // its running + waiting sequences (and those finishing output)
  bool dead = false;
};

// Index of the chosen replica, or -1 when every replica is dead. start: where ties begin.
int choose_replica(std::span<const ReplicaState> replicas, size_t start);

}  // namespace kvasir
