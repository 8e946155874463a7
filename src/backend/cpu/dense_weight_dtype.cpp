#include "backend/cpu/dense_weight_dtype.h"

#include <cstring>
#include <string>

#include "backend/host_buffer.h"
#include "quant/block_formats.h"

namespace kvasir {
namespace {

bool is_dense(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

float load_element(DType t, const uint8_t* p) {
  uint16_t h;
  switch (t) {
    case DType::kF16: std::memcpy(&h, p, 2); return quant::fp16_to_f32(h);
    case DType::kBF16: std::memcpy(&h, p, 2); return quant::bf16_to_f32(h);
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

// Round to nearest even; NaN stays NaN (quiet).
uint16_t bf16_from_f32(float f) {
  const uint32_t u = quant::bits_from_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void store_element(DType t, float v, uint8_t* p) {
  if (t == DType::kF32) {
    std::memcpy(p, &v, 4);
    return;
  }
  const uint16_t h = t == DType::kF16 ? quant::f32_to_fp16(v) : bf16_from_f32(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

bool dense_weight_converts(const Tensor& w, DType to) {
  return w.ndim == 2 && is_dense(w.dtype) && is_dense(to) && w.dtype != to;
}

StatusOr<Tensor> convert_dense_weight(const Tensor& w, DType to, std::unique_ptr<Buffer>* owner) {
  if (!dense_weight_converts(w, to)) {
    return invalid_argument("convert_dense_weight: " + std::string(dtype_name(w.dtype)) + " matrix to " +
                            std::string(dtype_name(to)));
  }
  const int64_t n = w.numel();
  const size_t in_size = w.dtype == DType::kF32 ? 4 : 2, out_size = to == DType::kF32 ? 4 : 2;
  KVASIR_ASSIGN_OR_RETURN(*owner, allocate_host_buffer(static_cast<size_t>(n) * out_size));
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>((*owner)->data());
  for (int64_t i = 0; i < n; ++i) {
    const size_t e = static_cast<size_t>(i);
    store_element(to, load_element(w.dtype, src + e * in_size), dst + e * out_size);
  }
  Tensor t = w;
  t.data = dst;
  t.dtype = to;
  return t;
}

}  // namespace kvasir
