// Scalar references for the CPU kernels' activation layouts (kernels.h): f32 -> Act32/ActK rows,
// int8 or as 16-bit (hi, lo) planes, plus the reference dequantizers (quant/dequantize.h) as plain
// function pointers. The SIMD kernels must reproduce these results bit for bit (same operation
// order, no fused multiply-add: the library builds with -ffp-contract=off).
#include <cmath>
#include <cstring>

#include "backend/cpu/quant/kernels.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {
template <DType kType>
void ref_dequant(const void* src, float* dst, int64_t k) {
  quant::dequantize_row(kType, src, dst, k);
}
}  // namespace

DequantFn ref_dequant_fn(DType t) {
  switch (t) {
    case DType::kF32: return ref_dequant<DType::kF32>;
    case DType::kF16: return ref_dequant<DType::kF16>;
    case DType::kBF16: return ref_dequant<DType::kBF16>;
    case DType::kQ4_0: return ref_dequant<DType::kQ4_0>;
    case DType::kQ4_1: return ref_dequant<DType::kQ4_1>;
    case DType::kQ5_0: return ref_dequant<DType::kQ5_0>;
    case DType::kQ5_1: return ref_dequant<DType::kQ5_1>;
    case DType::kQ8_0: return ref_dequant<DType::kQ8_0>;
    case DType::kQ8_1: return ref_dequant<DType::kQ8_1>;
    case DType::kQ2_K: return ref_dequant<DType::kQ2_K>;
    case DType::kQ3_K: return ref_dequant<DType::kQ3_K>;
    case DType::kQ4_K: return ref_dequant<DType::kQ4_K>;
    case DType::kQ5_K: return ref_dequant<DType::kQ5_K>;
    case DType::kQ6_K: return ref_dequant<DType::kQ6_K>;
    case DType::kQ8_K: return ref_dequant<DType::kQ8_K>;
    default: return nullptr;
  }
}

void quantize_act32_ref(const float* x, int64_t k, uint8_t* row) {
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* ds = reinterpret_cast<float*>(row + k);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float d = quant::quantize_block_q8(x + 32 * b, 32, qs + 32 * b);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += qs[32 * b + j];
    ds[2 * b] = d;
    ds[2 * b + 1] = d * static_cast<float>(sum);
  }
}

void quantize_actk_ref(const float* x, int64_t k, uint8_t* row) {
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  auto* b16 = reinterpret_cast<int16_t*>(d + k / 256);
  int16_t* b32 = b16 + k / 16;
  for (int64_t b = 0; b < k / 256; ++b) d[b] = quant::quantize_block_q8(x + 256 * b, 256, qs + 256 * b);
  for (int64_t g = 0; g < k / 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += qs[16 * g + j];
    b16[g] = static_cast<int16_t>(sum);
  }
  for (int64_t g = 0; g < k / 32; ++g) b32[g] = static_cast<int16_t>(b16[2 * g] + b16[2 * g + 1]);
}

// One block of 16-bit activations as hi/lo int8 planes (kernels.h, ActPlanes); returns d.
static float quantize_block_planes(const float* x, int n, int8_t* hi, int8_t* lo) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / kActQ16Max;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; ++j) {
    int q = static_cast<int>(quant::round_half_even(x[j] * id));
    if ((q & 255) == 128) ++q;
    const int h = (q + 128) >> 8;
    hi[j] = static_cast<int8_t>(h);
    lo[j] = static_cast<int8_t>(q - 256 * h);
  }
  return d;
}

void quantize_act32_planes_ref(const float* x, int64_t k, uint8_t* row) {
  uint8_t* rows[2] = {row, row + Act32Layout::row_bytes(k)};
  auto* hi = reinterpret_cast<int8_t*>(rows[0]);
  auto* lo = reinterpret_cast<int8_t*>(rows[1]);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float d = quantize_block_planes(x + 32 * b, 32, hi + 32 * b, lo + 32 * b);
    int sh = 0, sl = 0;
    for (int j = 0; j < 32; ++j) {
      sh += hi[32 * b + j];
      sl += lo[32 * b + j];
    }
    float* ds_hi = reinterpret_cast<float*>(rows[0] + k);
    float* ds_lo = reinterpret_cast<float*>(rows[1] + k);
    ds_hi[2 * b] = 256.0f * d;
    ds_hi[2 * b + 1] = 256.0f * d * static_cast<float>(sh);
    ds_lo[2 * b] = d;
    ds_lo[2 * b + 1] = d * static_cast<float>(sl);
  }
}

void quantize_actk_planes_ref(const float* x, int64_t k, uint8_t* row) {
  uint8_t* rows[2] = {row, row + ActKLayout::row_bytes(k)};
  for (int64_t b = 0; b < k / 256; ++b) {
    const float d = quantize_block_planes(x + 256 * b, 256, reinterpret_cast<int8_t*>(rows[0]) + 256 * b,
                                          reinterpret_cast<int8_t*>(rows[1]) + 256 * b);
    reinterpret_cast<float*>(rows[0] + k)[b] = 256.0f * d;
    reinterpret_cast<float*>(rows[1] + k)[b] = d;
  }
  for (uint8_t* r : rows) {
    const auto* qs = reinterpret_cast<const int8_t*>(r);
    auto* b16 = reinterpret_cast<int16_t*>(r + k + 4 * (k / 256));
    int16_t* b32 = b16 + k / 16;
    for (int64_t g = 0; g < k / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qs[16 * g + j];
      b16[g] = static_cast<int16_t>(sum);
    }
    for (int64_t g = 0; g < k / 32; ++g) b32[g] = static_cast<int16_t>(b16[2 * g] + b16[2 * g + 1]);
  }
}

void quantize_act_bf16_ref(const float* x, int64_t k, uint8_t* row) {
  auto* out = reinterpret_cast<uint16_t*>(row);
  for (int64_t i = 0; i < k; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    // Round to nearest even; a NaN stays a (quiet) NaN, as vcvtneps2bf16 does.
    out[i] = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                              : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  std::memset(row + 2 * k, 0, ActBf16Layout::row_bytes(k) - 2 * static_cast<size_t>(k));
}

}  // namespace kvasir::cpu
