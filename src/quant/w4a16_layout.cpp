#include "quant/w4a16_layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "quant/block_formats.h"

namespace kvasir::quant {

namespace {

size_t scale_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

// The permutation that makes act-order groups contiguous (stable, so columns keep their order
// inside a group), or empty when the columns already are in group order.
std::vector<int32_t> group_order(const PackedIntWeight& w) {
  std::vector<int32_t> perm;
  if (w.g_idx == nullptr) return perm;
  std::vector<int64_t> group(static_cast<size_t>(w.in_features));
  bool identity = true;
  for (int64_t k = 0; k < w.in_features; ++k) {
    group[static_cast<size_t>(k)] = packed_int_group(w, k);
    identity = identity && group[static_cast<size_t>(k)] == k / w.group_size;
  }
  if (identity) return perm;
  perm.resize(static_cast<size_t>(w.in_features));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int32_t a, int32_t b) { return group[static_cast<size_t>(a)] < group[static_cast<size_t>(b)]; });
  return perm;
}

}  // namespace

Status w4a16_supported(const PackedIntWeight& w) {
  const std::string what = std::string(int_weight_layout_name(w.layout)) + " weight [" +
                           std::to_string(w.out_features) + ", " + std::to_string(w.in_features) + "]";
  if (w.bits != 4) return unimplemented(what + ": " + std::to_string(w.bits) + "-bit weights have no W4A16 kernel");
  if (w.out_features % kW4a16TileRows != 0 || w.in_features % kW4a16TileCols != 0) {
    return unimplemented(what + ": the W4A16 kernels need out_features a multiple of 16 and in_features of 64");
  }
  if (w.group_size != w.in_features && w.group_size % 32 != 0) {
    return unimplemented(what + ": group size " + std::to_string(w.group_size) +
                         " (the W4A16 kernels take multiples of 32 or one group per row)");
  }
  if (w.g_idx != nullptr) {
    // After sorting by group, group g must be exactly columns [g * size, (g + 1) * size).
    const std::vector<int32_t> perm = group_order(w);
    for (size_t k = 0; k < perm.size(); ++k) {
      if (packed_int_group(w, perm[k]) != static_cast<int64_t>(k) / w.group_size) {
        return unimplemented(what + ": act-order groups of unequal sizes (g_idx) are not supported by the W4A16 kernels");
      }
    }
  }
  return Status();
}

void w4a16_code_position(int64_t in_features, int64_t n, int64_t k, int64_t* word, int* nibble) {
  const int64_t nt = n / kW4a16TileRows, kc = k / kW4a16TileCols;
  const int r = static_cast<int>(n % kW4a16TileRows), kk = static_cast<int>(k % kW4a16TileCols);
  const int g = r % 8, h = r / 8;
  const int step = kk / 16, e = kk % 16;
  const int t = (e % 8) / 2, high = e % 2, upper = e / 8;
  const int j = step / 2, q = (step % 2) * 2 + upper;
  const int lane = g * 4 + t;
  *word = ((nt * (in_features / kW4a16TileCols) + kc) * 32 + lane) * 4 + h * 2 + j;
  *nibble = q + 4 * high;
}

StatusOr<W4a16Weight> make_w4a16_weight(const PackedIntWeight& w) {
  KVASIR_RETURN_IF_ERROR(w4a16_supported(w));
  W4a16Weight out;
  out.out_features = w.out_features;
  out.in_features = w.in_features;
  out.group_size = w.group_size;
  out.num_groups = w.num_groups;
  out.scale_dtype = w.scale_dtype;
  out.perm = group_order(w);
  const int64_t N = w.out_features, K = w.in_features, G = w.num_groups;
  out.codes.assign(static_cast<size_t>(N * K / 8), 0u);
  // Where (row r, column c) of a 16 x 64 tile goes inside its 512 bytes, once: the loop below then
  // adds the tile's base (a per-element position computation is most of the cost at 8B sizes).
  int64_t in_tile[kW4a16TileRows][kW4a16TileCols];
  int shift[kW4a16TileRows][kW4a16TileCols];
  for (int64_t r = 0; r < kW4a16TileRows; ++r) {
    for (int64_t c = 0; c < kW4a16TileCols; ++c) {
      int nibble;
      w4a16_code_position(kW4a16TileCols, r, c, &in_tile[r][c], &nibble);
      shift[r][c] = 4 * nibble;
    }
  }
  const int64_t chunks = K / kW4a16TileCols;
  std::vector<uint32_t> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      row[static_cast<size_t>(k)] = packed_int_value(w, n, out.perm.empty() ? k : out.perm[static_cast<size_t>(k)]);
    }
    const int64_t r = n % kW4a16TileRows;
    for (int64_t kc = 0; kc < chunks; ++kc) {
      uint32_t* tile = out.codes.data() + ((n / kW4a16TileRows) * chunks + kc) * 128;  // 128 words a tile
      for (int64_t c = 0; c < kW4a16TileCols; ++c) {
        tile[in_tile[r][c]] |= row[static_cast<size_t>(kc * kW4a16TileCols + c)] << shift[r][c];
      }
    }
  }
  const size_t sb = scale_bytes(w.scale_dtype);
  out.scales.resize(static_cast<size_t>(G * N) * sb);
  bool symmetric = true;
  std::vector<uint8_t> zeros(static_cast<size_t>(G * N));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t n = 0; n < N; ++n) {
      // The stored bytes, moved: GPTQ / AWQ keep [G, N] already, pack-quantized [N, G].
      const int64_t src = w.layout == IntWeightLayout::kPackQuantized ? n * G + g : g * N + n;
      std::memcpy(&out.scales[static_cast<size_t>(g * N + n) * sb], w.scales + static_cast<size_t>(src) * sb, sb);
      const int32_t z = packed_int_zero(w, n, g);
      zeros[static_cast<size_t>(g * N + n)] = static_cast<uint8_t>(z);
      symmetric = symmetric && z == 8;
    }
  }
  if (!symmetric) out.zeros = std::move(zeros);
  return out;
}

float w4a16_value(const W4a16Weight& w, int64_t n, int64_t k) {
  int64_t word;
  int nibble;
  w4a16_code_position(w.in_features, n, k, &word, &nibble);
  const int32_t q = static_cast<int32_t>((w.codes[static_cast<size_t>(word)] >> (4 * nibble)) & 0xFu);
  const int64_t g = k / w.group_size, i = g * w.out_features + n;
  const int32_t z = w.zeros.empty() ? 8 : w.zeros[static_cast<size_t>(i)];
  float s;
  if (w.scale_dtype == DType::kF32) {
    std::memcpy(&s, &w.scales[static_cast<size_t>(i) * 4], 4);
  } else {
    uint16_t b;
    std::memcpy(&b, &w.scales[static_cast<size_t>(i) * 2], 2);
    s = w.scale_dtype == DType::kBF16 ? bf16_to_f32(b) : fp16_to_f32(b);
  }
  return static_cast<float>(q - z) * s;
}

}  // namespace kvasir::quant
