// Ids that cross module boundaries: token ids, KV block ids, the engine-internal request index and
// the content hash of a full KV block. Plain typedefs and one value type; must not grow behaviour
// beyond comparison and hashing (block hashing itself lives in kv/block_hash).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>

namespace kvasir {

using TokenId = int32_t;      // vocabulary index, as in GGUF / HF tokenizers
using BlockId = int32_t;      // index into the KV block pool; block 0 is the null block
using RequestIdx = uint64_t;  // assigned by the scheduler on admission, never reused

inline constexpr BlockId kNullBlockId = 0;

// SHA-256 digest of a full block's tokens chained with its parent's digest (kv/block_hash.h).
// 256 bits so that a collision (which would silently serve another prompt's KV) is not a concern.
struct BlockHash {
  std::array<uint8_t, 32> bytes{};

  friend bool operator==(const BlockHash& a, const BlockHash& b) { return a.bytes == b.bytes; }
  friend bool operator!=(const BlockHash& a, const BlockHash& b) { return !(a == b); }
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    // The digest is already uniformly distributed: any 8 bytes of it make a good bucket hash.
    uint64_t v;
    std::memcpy(&v, h.bytes.data(), sizeof(v));
    return static_cast<size_t>(v);
  }
};

}  // namespace kvasir
