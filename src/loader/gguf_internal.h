// Internal to the GGUF reader (gguf_file.cpp, gguf_metadata.cpp): a bounds-checked byte cursor and
// the fixed sizes of scalar value types. Not for use outside src/loader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "loader/gguf_file.h"

namespace kvasir::gguf_detail {

// Size in bytes of a scalar GGUF type; 0 for string and array.
size_t scalar_size(GgufType t);

// Reads little-endian values from a span; a read that would pass the end fails and moves nothing.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes, size_t pos = 0) : bytes_(bytes), pos_(pos) {}

  size_t pos() const { return pos_; }
  size_t size() const { return bytes_.size(); }
  size_t remaining() const { return pos_ <= bytes_.size() ? bytes_.size() - pos_ : 0; }
  const uint8_t* here() const { return bytes_.data() + pos_; }

  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, here(), sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_;
};

}  // namespace kvasir::gguf_detail
