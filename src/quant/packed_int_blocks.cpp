#include "quant/packed_int_blocks.h"

#include <cmath>
#include <cstring>

#include "quant/block_formats.h"

namespace kvasir::quant {

namespace {

// Every scale holds exactly in fp16 (always for fp16 files; bf16 / f32 ones are checked).
bool scales_fit_fp16(const PackedIntWeight& w) {
  if (w.scale_dtype == DType::kF16) return true;
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t g = 0; g < w.num_groups; ++g) {
      const float s = packed_int_scale(w, o, g);
      if (!std::isfinite(s) || fp16_to_f32(f32_to_fp16(s)) != s) return false;
    }
  }
  return true;
}

bool all_zeros_are(const PackedIntWeight& w, int32_t zero) {
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t g = 0; g < w.num_groups; ++g) {
      if (packed_int_zero(w, o, g) != zero) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<DType> exact_block_format(const PackedIntWeight& w) {
  // A 32-column block must sit inside one group: no act-order, groups of whole blocks.
  if (w.g_idx != nullptr || w.in_features % kQK32 != 0 || w.group_size % kQK32 != 0) return std::nullopt;
  if (!scales_fit_fp16(w)) return std::nullopt;
  const int32_t mid = 1 << (w.bits - 1);
  if (w.bits == 4) return all_zeros_are(w, mid) ? DType::kQ4_0 : DType::kQ8_0;  // q - zero in [-16, 15]
  // 8 bits: q - zero fits int8 for every q only when the zero is 128.
  if (w.bits == 8 && all_zeros_are(w, mid)) return DType::kQ8_0;
  return std::nullopt;
}

void packed_int_to_blocks(const PackedIntWeight& w, DType format, void* dst) {
  const int64_t blocks_per_row = w.in_features / kQK32;
  auto* q4 = static_cast<BlockQ4_0*>(dst);
  auto* q8 = static_cast<BlockQ8_0*>(dst);
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      const int64_t k0 = b * kQK32, g = k0 / w.group_size;
      const int32_t zero = packed_int_zero(w, o, g);
      const fp16_t d = f32_to_fp16(packed_int_scale(w, o, g));
      if (format == DType::kQ4_0) {
        BlockQ4_0 blk;
        blk.d = d;
        // GGML's Q4_0: byte j holds element j (low nibble) and j + 16 (high), value (nibble - 8) * d.
        for (int j = 0; j < 16; ++j) {
          blk.qs[j] = static_cast<uint8_t>(packed_int_value(w, o, k0 + j) | (packed_int_value(w, o, k0 + j + 16) << 4));
        }
        std::memcpy(&q4[o * blocks_per_row + b], &blk, sizeof(blk));
      } else {
        BlockQ8_0 blk;
        blk.d = d;
        for (int j = 0; j < kQK32; ++j) {
          blk.qs[j] = static_cast<int8_t>(static_cast<int32_t>(packed_int_value(w, o, k0 + j)) - zero);
        }
        std::memcpy(&q8[o * blocks_per_row + b], &blk, sizeof(blk));
      }
    }
  }
}

}  // namespace kvasir::quant
