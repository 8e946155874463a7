// SuffixChildIndex: the suffix tree's edges, (parent node, token) -> child node, in one flat
// open-addressing table (linear probing, backward-shift deletion, no tombstones). Each slot holds its
// whole key, so a lookup touches only the table, and a rehash never reads the nodes. Knows nothing
// of counts or of what the nodes mean.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ids.h"

namespace kvasir {

class SuffixChildIndex {
 public:
  static constexpr int32_t kNone = -1;

  SuffixChildIndex();

  // The child of parent along token, or kNone.
  int32_t find(int32_t parent, TokenId token) const;
  // The key must be absent (checked only by check_invariants: this is the hot path).
  void insert(int32_t parent, TokenId token, int32_t child);
  // The key must be present (checked).
  void erase(int32_t parent, TokenId token);

  int64_t size() const { return size_; }
  int64_t memory_bytes() const { return static_cast<int64_t>(slots_.capacity() * sizeof(Slot)); }
  // Aborts (KVASIR_CHECK) when the occupancy count or a probe run is wrong.
  void check_invariants() const;

 private:
  struct Slot {
    int32_t parent = kNone;
    TokenId token = 0;
    int32_t child = kNone;  // kNone: the slot is empty
  };

  uint64_t home(int32_t parent, TokenId token) const;
  void grow();

  std::vector<Slot> slots_;  // [power of two]
  int64_t size_ = 0;
};

}  // namespace kvasir
