// Weights of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) repacked once, at load,
// into the panels the AVX-512 VNNI kernel streams for small batches (kernels_avx512_packed.cpp):
// 16 weight rows side by side, each block's unsigned values as 8 groups of [16 rows x 4 bytes]
// (one vpdpbusd operand per group, no cross-lane reduction in the hot loop), then the block's 16
// dw and 16 mw floats for a vectorized epilogue. The 4-bit types keep their nibbles packed: group
// h (values 4h..4h+3) in the low and group h + 4 (values 16+4h..) in the high nibble of 4 group
// pairs [16 rows x 4 bytes], which are exactly the GGUF quant bytes qs[4h..4h+3] of each row, so
// their panels hold 1.2x the GGUF bytes (the 8-bit layout: 2x for 4-bit, 1.2x for Q8_0) and the
// kernel unmasks a pair with one and and one shift + and.
// Must not change results: the packed kernel computes exactly what the in-place AVX-512 tile does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace kvasir::cpu {

// Rows per panel, and the bytes of one block of a panel: 16 rows x 32 values + 16 dw + 16 mw; the
// nibble layout: 16 rows x 16 bytes of value pairs + 16 dw + 16 mw.
constexpr int64_t kPackedPanelRows = 16;
constexpr size_t kPackedBlockBytes = 16 * 32 + 2 * 16 * sizeof(float);
constexpr size_t kPackedNibbleBlockBytes = 16 * 16 + 2 * 16 * sizeof(float);

class PackedQ32 {
 public:
  // True for the weight types this layout holds.
  static bool supports(DType t);
  // True for the types whose panels keep 4-bit values in nibble pairs (Q4_0, Q4_1).
  static bool nibble_layout(DType t);
  // Repacks W [m, k] (GGUF rows of `t`, k a multiple of 32). Rows past m in the last panel are
  // zero weights with zero scales. Only for supports(t).
  static std::unique_ptr<PackedQ32> pack(const void* w, DType t, int64_t m, int64_t k);

  DType type() const { return type_; }
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  size_t bytes() const { return bytes_; }
  bool nibbles() const { return nibble_layout(type_); }
  // kPackedNibbleBlockBytes for nibble panels, else kPackedBlockBytes.
  size_t block_bytes() const { return nibbles() ? kPackedNibbleBlockBytes : kPackedBlockBytes; }
  // Panel p: rows [16 p, 16 p + 16), k / 32 blocks of block_bytes(), 64-byte aligned.
  const uint8_t* panel(int64_t p) const { return data_.get() + static_cast<size_t>(p) * panel_bytes(); }
  size_t panel_bytes() const { return static_cast<size_t>(k_ / 32) * block_bytes(); }

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
