#include "quant/packed_int_weight.h"

#include <cstring>
#include <vector>

#include "quant/block_formats.h"

namespace kvasir::quant {

namespace {

int32_t load_i32(const uint8_t* base, int64_t index) {
  int32_t v;
  std::memcpy(&v, base + index * 4, 4);
  return v;
}

// Value `slot` (0 .. pack-1) of an int32 word: bits [slot * bits, slot * bits + bits).
uint32_t field(int32_t word, int slot, int bits) {
  return (static_cast<uint32_t>(word) >> (slot * bits)) & ((1u << bits) - 1u);
}

// AWQ's GEMM packer puts column order[i] of each group of 8 in nibble i, order = 0 2 4 6 1 3 5 7
// (AutoAWQ's pack; its reverse order 0 4 1 5 2 6 3 7 is the nibble of each column).
constexpr int kAwqNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace

const char* int_weight_layout_name(IntWeightLayout layout) {
  switch (layout) {
    case IntWeightLayout::kGptq:
      return "gptq";
    case IntWeightLayout::kAwqGemm:
      return "awq";
    case IntWeightLayout::kPackQuantized:
      return "pack-quantized";
  }
  return "?";
}

uint32_t packed_int_value(const PackedIntWeight& w, int64_t out, int64_t in) {
  const int pack = 32 / w.bits;
  switch (w.layout) {
    case IntWeightLayout::kGptq:
      return field(load_i32(w.qweight, (in / pack) * w.out_features + out), static_cast<int>(in % pack), w.bits);
    case IntWeightLayout::kAwqGemm: {
      const int64_t words_per_row = w.out_features / pack;
      return field(load_i32(w.qweight, in * words_per_row + out / pack), kAwqNibbleOfColumn[out % pack], w.bits);
    }
    case IntWeightLayout::kPackQuantized: {
      const int64_t words_per_row = (w.in_features + pack - 1) / pack;
      return field(load_i32(w.qweight, out * words_per_row + in / pack), static_cast<int>(in % pack), w.bits);
    }
  }
  return 0;
}

int32_t packed_int_zero(const PackedIntWeight& w, int64_t out, int64_t group) {
  const int pack = 32 / w.bits;
  switch (w.layout) {
    case IntWeightLayout::kGptq:
      return static_cast<int32_t>(field(load_i32(w.zeros, group * (w.out_features / pack) + out / pack),
                                        static_cast<int>(out % pack), w.bits)) +
             w.zero_offset;
    case IntWeightLayout::kAwqGemm:
      return static_cast<int32_t>(field(load_i32(w.zeros, group * (w.out_features / pack) + out / pack),
                                        kAwqNibbleOfColumn[out % pack], w.bits));
    case IntWeightLayout::kPackQuantized:
      // Symmetric: the stored values carry the + 2^(bits-1) offset and the zero point is 0.
      if (w.zeros == nullptr) return 1 << (w.bits - 1);
      return static_cast<int32_t>(
          field(load_i32(w.zeros, (out / pack) * w.num_groups + group), static_cast<int>(out % pack), w.bits));
  }
  return 0;
}

float packed_int_scale(const PackedIntWeight& w, int64_t out, int64_t group) {
  const int64_t index = w.layout == IntWeightLayout::kPackQuantized ? out * w.num_groups + group
                                                                     : group * w.out_features + out;
  switch (w.scale_dtype) {
    case DType::kF16: {
      fp16_t h;
      std::memcpy(&h, w.scales + index * 2, 2);
      return fp16_to_f32(h);
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, w.scales + index * 2, 2);
      return bf16_to_f32(b);
    }
    default: {
      float f;
      std::memcpy(&f, w.scales + index * 4, 4);
      return f;
    }
  }
}

int64_t packed_int_group(const PackedIntWeight& w, int64_t in) {
  if (w.g_idx != nullptr) return load_i32(w.g_idx, in);
  return in / w.group_size;
}

void dequantize_packed_int(const PackedIntWeight& w, float* dst) {
  // A row's zeros and scales once per group, then one integer read per weight.
  std::vector<int32_t> zero(static_cast<size_t>(w.num_groups));
  std::vector<float> scale(static_cast<size_t>(w.num_groups));
  std::vector<int32_t> group(static_cast<size_t>(w.in_features));
  for (int64_t k = 0; k < w.in_features; ++k) group[static_cast<size_t>(k)] = static_cast<int32_t>(packed_int_group(w, k));
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t g = 0; g < w.num_groups; ++g) {
      zero[static_cast<size_t>(g)] = packed_int_zero(w, o, g);
      scale[static_cast<size_t>(g)] = packed_int_scale(w, o, g);
    }
    float* row = dst + o * w.in_features;
    for (int64_t k = 0; k < w.in_features; ++k) {
      const auto g = static_cast<size_t>(group[static_cast<size_t>(k)]);
      const int32_t q = static_cast<int32_t>(packed_int_value(w, o, k));
      row[k] = static_cast<float>(q - zero[g]) * scale[g];
    }
  }
}

}  // namespace kvasir::quant
