// Weights of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) repacked once, at load,
// into the panels the AVX-512 VNNI batched kernel streams (kernels_avx512_packed.cpp): 16 weight
// rows side by side, each block's unsigned values as 8 groups of [16 rows x 4 bytes] (one vpdpbusd
// operand per group, no nibble unpacking or cross-lane reduction in the hot loop), then the block's
// 16 dw and 16 mw floats for a vectorized epilogue. About 2x the GGUF bytes of a 4-bit type.
// The GGUF bytes stay in use for decode (batch 1 reads 4-bit blocks in place, which is faster).
// Must not change results: the packed kernel computes exactly what the in-place AVX-512 tile does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace kvasir::cpu {

// Rows per panel, and the bytes of one block of a panel: 16 rows x 32 values + 16 dw + 16 mw.
constexpr int64_t kPackedPanelRows = 16;
constexpr size_t kPackedBlockBytes = 16 * 32 + 2 * 16 * sizeof(float);

class PackedQ32 {
 public:
  // True for the weight types this layout holds.
  static bool supports(DType t);
  // Repacks W [m, k] (GGUF rows of `t`, k a multiple of 32). Rows past m in the last panel are
  // zero weights with zero scales. Only for supports(t).
  static std::unique_ptr<PackedQ32> pack(const void* w, DType t, int64_t m, int64_t k);

  DType type() const { return type_; }
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  size_t bytes() const { return bytes_; }
  // Panel p: rows [16 p, 16 p + 16), k / 32 blocks of kPackedBlockBytes, 64-byte aligned.
  const uint8_t* panel(int64_t p) const { return data_.get() + static_cast<size_t>(p) * panel_bytes(); }
  size_t panel_bytes() const { return static_cast<size_t>(k_ / 32) * kPackedBlockBytes; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  PackedQ32(DType t, int64_t m, int64_t k);
  DType type_;
  int64_t m_, k_;
  size_t bytes_;
  std::unique_ptr<uint8_t, Free> data_;
};

}  // namespace kvasir::cpu
