#include "backend/cpu/quant/quant_test_util.h"

#include <cstring>

#include "quant/block_formats.h"

namespace kvasir::cpu::testing {
namespace {

using quant::bits_from_f32;
using quant::f32_to_fp16;
using quant::fp16_t;

void put_fp16(uint8_t* p, float v) {
  const fp16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

int64_t block_size(DType t) { return dtype_info(t)->block_size; }

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const DTypeInfo info = *dtype_info(t);
  const size_t bytes = static_cast<size_t>(rows * k / info.block_size) * info.type_size;
  std::vector<uint8_t> out(bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> pos(0.5f, 1.5f);
  auto sym = [&](float scale) { return unit(rng) * scale; };
  switch (t) {
    case DType::kF32:
      for (size_t i = 0; i < bytes; i += 4) {
        const float v = unit(rng);
        std::memcpy(&out[i], &v, 4);
      }
      return out;
    case DType::kF16:
      for (size_t i = 0; i < bytes; i += 2) put_fp16(&out[i], unit(rng));
      return out;
    case DType::kBF16:
      for (size_t i = 0; i < bytes; i += 2) {
        const uint32_t u = bits_from_f32(unit(rng)) >> 16;
        out[i] = static_cast<uint8_t>(u);
        out[i + 1] = static_cast<uint8_t>(u >> 8);
      }
      return out;
    default:
      break;
  }
  for (size_t off = 0; off < bytes; off += info.type_size) {
    uint8_t* b = &out[off];
    switch (t) {
      case DType::kQ4_0: put_fp16(b, pos(rng) / 8); break;
      case DType::kQ5_0: put_fp16(b, pos(rng) / 16); break;
      case DType::kQ8_0: put_fp16(b, pos(rng) / 128); break;
      case DType::kQ4_1: put_fp16(b, pos(rng) / 8); put_fp16(b + 2, sym(1.0f)); break;
      case DType::kQ5_1: put_fp16(b, pos(rng) / 16); put_fp16(b + 2, sym(1.0f)); break;
      case DType::kQ8_1: put_fp16(b, pos(rng) / 128); put_fp16(b + 2, sym(10.0f)); break;
      case DType::kQ2_K: put_fp16(b + 80, pos(rng) / 32); put_fp16(b + 82, pos(rng) / 32); break;
      case DType::kQ3_K: put_fp16(b + 108, pos(rng) / 64); break;
      case DType::kQ4_K: case DType::kQ5_K:
        put_fp16(b, pos(rng) / 256); put_fp16(b + 2, pos(rng) / 256); break;
      case DType::kQ6_K: put_fp16(b + 208, pos(rng) / 2048); break;
      case DType::kQ8_K: {
        const float d = pos(rng) / 128;
        std::memcpy(b, &d, 4);
        break;
      }
      default: break;
    }
  }
  return out;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> isas{CpuIsa::kAvx2};
  if (cpu_supports(CpuIsa::kAvx512)) isas.push_back(CpuIsa::kAvx512);
  if (cpu_supports(CpuIsa::kAmx)) isas.push_back(CpuIsa::kAmx);
  return isas;
}

std::vector<DType> matmul_types() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
          DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

}  // namespace kvasir::cpu::testing
