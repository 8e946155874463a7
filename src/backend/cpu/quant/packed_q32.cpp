#include "backend/cpu/quant/packed_q32.h"

#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "quant/block_formats.h"

namespace kvasir::cpu {
namespace {

// One GGUF block as the in-place AVX-512 tile sees it: the 32 unsigned values its vpdpbusd
// multiplies, and the block's fp16 d (and m), with w = dw * u + mw (gather_dm16: formats with a
// zero point fold it into mw = m_from_d() * dw; Q8_0's signed values are shifted by +128, an XOR,
// with mw = -128 dw).
struct UnpackedBlock {
  uint8_t u[32];
  uint16_t d, m;  // the GGUF's fp16 bits (m: 0 where the format implies it)
};

template <typename B>
B load_block(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

void nibbles(const uint8_t* qs, uint8_t* u) {
  for (int i = 0; i < 16; ++i) {
    u[i] = qs[i] & 0x0f;
    u[i + 16] = qs[i] >> 4;
  }
}

void add_high_bits(const uint8_t* qh, uint8_t* u) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(u[i] | (((h >> i) & 1u) << 4));
}

UnpackedBlock unpack(DType t, const uint8_t* p) {
  UnpackedBlock o;
  switch (t) {
    case DType::kQ4_0: {
      const auto b = load_block<quant::BlockQ4_0>(p);
      nibbles(b.qs, o.u);
      o.d = b.d;
      o.m = {};
      break;
    }
    case DType::kQ4_1: {
      const auto b = load_block<quant::BlockQ4_1>(p);
      nibbles(b.qs, o.u);
      o.d = b.d;
      o.m = b.m;
      break;
    }
    case DType::kQ5_0: {
      const auto b = load_block<quant::BlockQ5_0>(p);
      nibbles(b.qs, o.u);
      add_high_bits(b.qh, o.u);
      o.d = b.d;
      o.m = {};
      break;
    }
    case DType::kQ5_1: {
      const auto b = load_block<quant::BlockQ5_1>(p);
      nibbles(b.qs, o.u);
      add_high_bits(b.qh, o.u);
      o.d = b.d;
      o.m = b.m;
      break;
    }
    case DType::kQ8_0: {
      const auto b = load_block<quant::BlockQ8_0>(p);
      for (int i = 0; i < 32; ++i) o.u[i] = static_cast<uint8_t>(b.qs[i]) ^ 0x80u;
      o.d = b.d;
      o.m = {};
      break;
    }
    default: KVASIR_CHECK_MSG(false, "PackedQ32: unsupported weight type");
  }
  return o;
}

}  // namespace

void PackedQ32::Free::operator()(uint8_t* p) const { std::free(p); }

bool PackedQ32::supports(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ8_0;
}

float PackedQ32::m_from_d() const {
  switch (type_) {
    case DType::kQ4_0: return -8.0f;
    case DType::kQ5_0: return -16.0f;
    case DType::kQ8_0: return -128.0f;
    default: return 0.0f;
  }
}

bool PackedQ32::nibble_layout(DType t) { return t == DType::kQ4_0 || t == DType::kQ4_1; }

PackedQ32::PackedQ32(DType t, int64_t m, int64_t k) : type_(t), m_(m), k_(k) {
  const int64_t panels = (m + kPackedPanelRows - 1) / kPackedPanelRows;
  bytes_ = static_cast<size_t>(panels) * panel_bytes();
  void* p = std::aligned_alloc(64, bytes_ == 0 ? 64 : (bytes_ + 63) / 64 * 64);
  KVASIR_CHECK_MSG(p != nullptr, "PackedQ32: out of memory");
  data_.reset(static_cast<uint8_t*>(p));
  std::memset(p, 0, bytes_);
}

std::unique_ptr<PackedQ32> PackedQ32::pack(const void* w, DType t, int64_t m, int64_t k) {
  KVASIR_CHECK(supports(t) && m >= 0 && k > 0 && k % 32 == 0);
  std::unique_ptr<PackedQ32> out(new PackedQ32(t, m, k));
  const size_t block_bytes = dtype_info(t)->type_size;  // GGUF bytes per 32 values
  const int64_t nb = k / 32;
  const size_t row_bytes = static_cast<size_t>(nb) * block_bytes;
  for (int64_t r = 0; r < m; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes;
    uint8_t* panel = out->data_.get() + static_cast<size_t>(r / kPackedPanelRows) * out->panel_bytes();
    const int64_t lane = r % kPackedPanelRows;
    for (int64_t b = 0; b < nb; ++b) {
      const UnpackedBlock u = unpack(t, row + static_cast<size_t>(b) * block_bytes);
      uint8_t* blk = panel + static_cast<size_t>(b) * out->value_bytes();
      if (out->nibbles()) {
        // Pair h: groups h (low nibbles) and h + 4 (high nibbles) of every row.
        for (int h = 0; h < 4; ++h) {
          for (int j = 0; j < 4; ++j) {
            blk[64 * h + 4 * lane + j] = static_cast<uint8_t>(u.u[4 * h + j] | (u.u[16 + 4 * h + j] << 4));
          }
        }
      } else {
        // Group g holds values 4g..4g+3 of every row: [row 0: 4 bytes | row 1: 4 bytes | ...].
        for (int g = 0; g < 8; ++g) std::memcpy(blk + 64 * g + 4 * lane, u.u + 4 * g, 4);
      }
      const size_t scale = static_cast<size_t>(b) * kPackedScaleBytes + 2 * static_cast<size_t>(lane);
      std::memcpy(panel + out->d_offset() + scale, &u.d, 2);
      if (out->stored_m()) std::memcpy(panel + out->m_offset() + scale, &u.m, 2);
    }
  }
  return out;
}

}  // namespace kvasir::cpu
