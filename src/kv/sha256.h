// SHA-256 (FIPS 180-4), incremental: the digest behind prefix-cache block hashes. A small,
// dependency-free implementation for hashing a few hundred bytes per KV block; not constant-time
// and not meant for secrets or bulk data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvasir {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(const void* data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Pads and returns the digest; the object must not be updated afterwards.
  Digest finish();

  static Digest hash(const void* data, size_t len);

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffer_len_ = 0;
  uint64_t total_len_ = 0;  // bytes
};

}  // namespace kvasir
