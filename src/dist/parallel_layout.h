// ParallelLayout: how the ranks of one engine's group are arranged, vLLM's order. The world is
// tensor_parallel x pipeline_parallel ranks; rank = pp_rank * tp + tp_rank, so the ranks of one
// pipeline stage are contiguous (a stage's tensor-parallel group) and rank 0 is the first stage's
// first rank (the one that keeps the engine). Plain arithmetic: no processes, no communicators.
#pragma once

namespace kvasir::dist {

struct ParallelLayout {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;

  int world_size() const { return tensor_parallel * pipeline_parallel; }
  int tp_rank(int rank) const { return rank % tensor_parallel; }
  int pp_rank(int rank) const { return rank / tensor_parallel; }
  int rank(int pp_rank, int tp_rank) const { return pp_rank * tensor_parallel + tp_rank; }
  bool is_first_stage(int rank) const { return pp_rank(rank) == 0; }
  bool is_last_stage(int rank) const { return pp_rank(rank) == pipeline_parallel - 1; }
};

}  // namespace kvasir::dist
