// Overflow-checked size arithmetic for the file parsers: every count, length and offset read from
// an untrusted file goes through these before it is used to index memory. Must not report errors
// itself: callers turn a `false` into a Status that names the field and offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace kvasir::checked {

// out = a + b; false on overflow (out untouched).
inline bool add(uint64_t a, uint64_t b, uint64_t* out) {
  if (a > std::numeric_limits<uint64_t>::max() - b) return false;
  *out = a + b;
  return true;
}

// out = a * b; false on overflow (out untouched).
inline bool mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

inline bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// out = value rounded up to a multiple of `align` (a power of two); false on overflow.
inline bool align_up(uint64_t value, uint64_t align, uint64_t* out) {
  uint64_t t;
  if (!add(value, align - 1, &t)) return false;
  *out = t & ~(align - 1);
  return true;
}

// True when [offset, offset + len) lies inside [0, size).
inline bool range_fits(uint64_t offset, uint64_t len, uint64_t size) {
  return offset <= size && len <= size - offset;
}

}  // namespace kvasir::checked
