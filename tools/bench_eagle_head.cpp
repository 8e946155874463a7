#include "bench_eagle_head.h"

namespace kvasir {

BenchEagleHead::BenchEagleHead(DraftHead& head, KvCache& cache, int batch_size, int num_speculative_tokens)
    : proposer_(head, cache), batch_size_(batch_size), k_(num_speculative_tokens) {
  for (int s = 0; s < batch_size; ++s) ids_.push_back("bench-" + std::to_string(s));
  drafts_.resize(static_cast<size_t>(batch_size));
}

int64_t BenchEagleHead::propose(const std::vector<std::vector<int32_t>>& histories, int first_position, int n,
                                bool draft) {
  rows_.clear();
  for (int s = 0; s < batch_size_; ++s) {
    rows_.push_back(EagleStepRow{ids_[static_cast<size_t>(s)], histories[static_cast<size_t>(s)], first_position, n,
                                  s * n, draft ? k_ : 0, &drafts_[static_cast<size_t>(s)]});
  }
  proposer_.run_step(rows_);
  int64_t made = 0;
  for (const auto& d : drafts_) made += static_cast<int64_t>(d.size());
  return made;
}

void BenchEagleHead::finish_all() {
  for (const std::string& id : ids_) proposer_.finish_request(id);
}

}  // namespace kvasir
