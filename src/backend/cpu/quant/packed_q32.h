// Weights of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) repacked once, at load,
// into the panels the AVX-512 VNNI kernel streams for small batches (kernels_avx512_packed.cpp):
// 16 weight rows side by side, each block's unsigned values as 8 groups of [16 rows x 4 bytes]
// (one vpdpbusd operand per group, no cross-lane reduction in the hot loop); the 4-bit types keep
// their nibbles packed: group h (values 4h..4h+3) in the low and group h + 4 (values 16+4h..) in
// the high nibble of 4 group pairs [16 rows x 4 bytes], which are exactly the GGUF quant bytes
// qs[4h..4h+3] of each row. After all blocks' values, the blocks' 16 fp16 scales d, then (Q4_1,
// Q5_1) their 16 fp16 m: the GGUF's own halves, widened by the kernel as gather_dm16 does, so
// Q4_0, Q4_1 and Q8_0 panels hold exactly the GGUF bytes (Q5_0/Q5_1: ~1.5x) and a batch reads no
// more memory than decode does.
// Must not change results: the packed kernel computes exactly what the in-place AVX-512 tile does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace kvasir::cpu {

// Rows per panel, and the value bytes of one block of a panel: 16 rows x 32 values (nibble
// layout: 16 rows x 16 value pairs); each block also has 16 fp16 d (and 16 fp16 m) after the values.
constexpr int64_t kPackedPanelRows = 16;
constexpr size_t kPackedValueBytes = 16 * 32;
constexpr size_t kPackedNibbleValueBytes = 16 * 16;
constexpr size_t kPackedScaleBytes = 16 * 2;

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
  // Formats that store m per block (Q4_1, Q5_1); the others' m is m_from_d() * d.
  bool stored_m() const { return type_ == DType::kQ4_1 || type_ == DType::kQ5_1; }
  float m_from_d() const;
  // Value bytes per block: kPackedNibbleValueBytes or kPackedValueBytes.
  size_t value_bytes() const { return nibbles() ? kPackedNibbleValueBytes : kPackedValueBytes; }
  // Within a panel: block b's values at b * value_bytes(), its d at d_offset() + b * 32, its m at
  // m_offset() + b * 32 (stored_m() only).
  size_t d_offset() const { return static_cast<size_t>(k_ / 32) * value_bytes(); }
  size_t m_offset() const { return d_offset() + static_cast<size_t>(k_ / 32) * kPackedScaleBytes; }
  // Panel p: rows [16 p, 16 p + 16), 64-byte aligned.
  const uint8_t* panel(int64_t p) const { return data_.get() + static_cast<size_t>(p) * panel_bytes(); }
  size_t panel_bytes() const {
    const size_t used = stored_m() ? m_offset() + static_cast<size_t>(k_ / 32) * kPackedScaleBytes : m_offset();
    return (used + 63) / 64 * 64;
  }

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
