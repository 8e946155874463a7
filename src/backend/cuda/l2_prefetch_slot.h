// Where a decode-sized linear's L2 prefetch record goes in its step (CudaBackend::
// prefetch_linear_weights): right after the last weight-streaming record before the linear's
// own, the gap in which DRAM would otherwise idle. Host code over the step's record kinds only.
#pragma once

#include <cstddef>
#include <optional>

#include "backend/cuda/op_records.h"

namespace kvasir::cuda {

// Linears of at most this many tokens prefetch: decode batches, whose linears stream their weights.
constexpr int64_t kL2PrefetchMaxRows = 8;

// Records that stream weights: the previous one ends the gap a prefetch can use.
inline bool streams_weights(OpKind k) {
  return k == OpKind::kLinear || k == OpKind::kMultiGemv || k == OpKind::kGemvGated || k == OpKind::kFp8Linear ||
         k == OpKind::kGgufLinear || k == OpKind::kW4a16Linear || k == OpKind::kMoeExperts ||
         k == OpKind::kMoeRoute || k == OpKind::kEmbedding;
}

struct L2PrefetchSlot {
  size_t insert_at;  // where a new record goes
  size_t existing;   // 1 + the index of the gap's prefetch record (its ranges join it), 0: none
};

// kind_at(i) for i < n is the step's records' kinds; record n - 1 is the linear's own (new, or the
// one it joined). None without a weight-streaming record before it, or (unless every) without a
// decode attention in the gap: only the o projection then.
template <class KindAt>
std::optional<L2PrefetchSlot> l2_prefetch_slot(KindAt kind_at, size_t n, bool every) {
  if (n < 2) return std::nullopt;
  size_t at = n - 1;
  bool attention = false;
  size_t existing = 0;
  while (at > 0) {
    const OpKind k = kind_at(at - 1);
    if (streams_weights(k)) break;
    if (k == OpKind::kDecodeAttention) attention = true;
    if (k == OpKind::kL2Prefetch) existing = at;
    --at;
  }
  if (at == 0 || !(attention || every)) return std::nullopt;
  return L2PrefetchSlot{at, existing};
}

}  // namespace kvasir::cuda
