#include "spec/suffix_child_index.h"

#include "common/check.h"

namespace kvasir {

namespace {

uint64_t mix(uint64_t x) {
  // splitmix64's finalizer: parent ids are dense and tokens small, so both need spreading.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr size_t kInitialSlots = 64;

}  // namespace

SuffixChildIndex::SuffixChildIndex() : slots_(kInitialSlots) {}

uint64_t SuffixChildIndex::home(int32_t parent, TokenId token) const {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(token);
  return mix(key) & (slots_.size() - 1);
}

int32_t SuffixChildIndex::find(int32_t parent, TokenId token) const {
  const uint64_t mask = slots_.size() - 1;
  for (uint64_t s = home(parent, token);; s = (s + 1) & mask) {
    const Slot& slot = slots_[s];
    if (slot.child == kNone) return kNone;
    if (slot.parent == parent && slot.token == token) return slot.child;
  }
}

void SuffixChildIndex::insert(int32_t parent, TokenId token, int32_t child) {
  // Load factor <= 0.7 keeps probe runs short; the slots of one run share cache lines.
  if (static_cast<uint64_t>(size_ + 1) * 10 > slots_.size() * 7) grow();
  const uint64_t mask = slots_.size() - 1;
  uint64_t s = home(parent, token);
  while (slots_[s].child != kNone) s = (s + 1) & mask;
  slots_[s] = Slot{parent, token, child};
  size_++;
}

void SuffixChildIndex::erase(int32_t parent, TokenId token) {
  const uint64_t mask = slots_.size() - 1;
  uint64_t hole = home(parent, token);
  while (!(slots_[hole].parent == parent && slots_[hole].token == token && slots_[hole].child != kNone)) {
    KVASIR_CHECK_MSG(slots_[hole].child != kNone, "suffix tree child index: erasing an absent edge");
    hole = (hole + 1) & mask;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole when their home slot
  // does not lie cyclically in (hole, here], so every entry stays reachable without tombstones.
  for (uint64_t s = (hole + 1) & mask; slots_[s].child != kNone; s = (s + 1) & mask) {
    uint64_t h = home(slots_[s].parent, slots_[s].token);
    bool stays = hole <= s ? (hole < h && h <= s) : (hole < h || h <= s);
    if (stays) continue;
    slots_[hole] = slots_[s];
    hole = s;
  }
  slots_[hole] = Slot{};
  size_--;
}

void SuffixChildIndex::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  const uint64_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.child == kNone) continue;
    uint64_t s = home(slot.parent, slot.token);
    while (slots_[s].child != kNone) s = (s + 1) & mask;
    slots_[s] = slot;
  }
}

void SuffixChildIndex::check_invariants() const {
  int64_t occupied = 0;
  for (const Slot& slot : slots_) {
    if (slot.child == kNone) continue;
    occupied++;
    KVASIR_CHECK(find(slot.parent, slot.token) == slot.child);
  }
  KVASIR_CHECK(occupied == size_);
  KVASIR_CHECK(static_cast<uint64_t>(size_) * 10 <= slots_.size() * 7);
}

}  // namespace kvasir
