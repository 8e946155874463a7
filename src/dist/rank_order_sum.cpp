#include "dist/rank_order_sum.h"

#include <cstring>

#include "common/check.h"
#include "dist/communicator.h"
#include "quant/block_formats.h"

namespace kvasir::dist {

size_t reduce_element_bytes(DType dtype) {
  if (dtype == DType::kF32) return 4;
  if (dtype == DType::kBF16) return 2;
  return 0;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

void sum_in_rank_order(const void* const* inputs, int num_inputs, void* out, size_t count, DType dtype) {
  KVASIR_CHECK(num_inputs >= 1);
  if (dtype == DType::kF32) {
    float* o = static_cast<float*>(out);
    for (size_t i = 0; i < count; ++i) {
      float acc = static_cast<const float*>(inputs[0])[i];
      for (int r = 1; r < num_inputs; ++r) acc += static_cast<const float*>(inputs[r])[i];
      o[i] = acc;
    }
    return;
  }
  KVASIR_CHECK_MSG(dtype == DType::kBF16, "sum_in_rank_order takes kF32 or kBF16");
  uint16_t* o = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    float acc = quant::bf16_to_f32(static_cast<const uint16_t*>(inputs[0])[i]);
    for (int r = 1; r < num_inputs; ++r) acc += quant::bf16_to_f32(static_cast<const uint16_t*>(inputs[r])[i]);
    o[i] = f32_to_bf16(acc);
  }
}

}  // namespace kvasir::dist
