#include "core/dtype.h"

namespace kvasir {

std::optional<DTypeInfo> dtype_info(uint32_t t) {
  switch (static_cast<DType>(t)) {
    case DType::kF32: return DTypeInfo{"f32", 1, 4, false};
    case DType::kF16: return DTypeInfo{"f16", 1, 2, false};
    case DType::kBF16: return DTypeInfo{"bf16", 1, 2, false};
    case DType::kF64: return DTypeInfo{"f64", 1, 8, false};
    case DType::kI8: return DTypeInfo{"i8", 1, 1, false};
    case DType::kI16: return DTypeInfo{"i16", 1, 2, false};
    case DType::kI32: return DTypeInfo{"i32", 1, 4, false};
    case DType::kI64: return DTypeInfo{"i64", 1, 8, false};
    case DType::kQ4_0: return DTypeInfo{"q4_0", 32, 2 + 16, true};
    case DType::kQ4_1: return DTypeInfo{"q4_1", 32, 2 + 2 + 16, true};
    case DType::kQ5_0: return DTypeInfo{"q5_0", 32, 2 + 4 + 16, true};
    case DType::kQ5_1: return DTypeInfo{"q5_1", 32, 2 + 2 + 4 + 16, true};
    case DType::kQ8_0: return DTypeInfo{"q8_0", 32, 2 + 32, true};
    case DType::kQ8_1: return DTypeInfo{"q8_1", 32, 4 + 32, true};
    case DType::kQ2_K: return DTypeInfo{"q2_K", 256, 256 / 16 + 256 / 4 + 2 + 2, true};
    case DType::kQ3_K: return DTypeInfo{"q3_K", 256, 256 / 8 + 256 / 4 + 12 + 2, true};
    case DType::kQ4_K: return DTypeInfo{"q4_K", 256, 2 + 2 + 12 + 256 / 2, true};
    case DType::kQ5_K: return DTypeInfo{"q5_K", 256, 2 + 2 + 12 + 256 / 8 + 256 / 2, true};
    case DType::kQ6_K: return DTypeInfo{"q6_K", 256, 256 / 2 + 256 / 4 + 256 / 16 + 2, true};
    case DType::kQ8_K: return DTypeInfo{"q8_K", 256, 4 + 256 + 16 * 2, true};
    case DType::kF8E4M3: return DTypeInfo{"f8_e4m3", 1, 1, false};
    case DType::kF8E5M2: return DTypeInfo{"f8_e5m2", 1, 1, false};
  }
  return std::nullopt;
}

std::optional<size_t> row_bytes(DType t, int64_t n) {
  auto info = dtype_info(t);
  if (!info || n < 0 || n % info->block_size != 0) return std::nullopt;
  return static_cast<size_t>(n / info->block_size) * info->type_size;
}

std::string_view dtype_name(DType t) {
  auto info = dtype_info(t);
  return info ? info->name : std::string_view("unknown");
}

}  // namespace kvasir
