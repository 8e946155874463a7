// DType: element and block formats of weights and activations, numbered exactly as GGML's
// ggml_type so GGUF tensor types map 1:1 (FP8, which GGML lacks, numbered past them). Quantized types are stored in blocks along the last
// (contiguous) dimension: a row of K elements is K / block_size blocks of type_size bytes.
// Must not hold kernels: block layouts and (de)quantization live in src/quant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvasir {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  // Not GGML types (GGML has no FP8): ids from kFirstNonGgmlType up are Kvasir's own, for
  // safetensors checkpoints and caches; a GGUF file naming one is refused.
  kF8E4M3 = 256,  // float8_e4m3fn
  kF8E5M2 = 257,  // float8_e5m2
};

inline constexpr uint32_t kFirstNonGgmlType = 256;

// One byte per element of either FP8 format (weights, KV caches).
inline constexpr bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

struct DTypeInfo {
  std::string_view name;   // GGML's name: "f32", "q4_K", ...
  uint32_t block_size;     // elements per block (1 for plain types)
  uint32_t type_size;      // bytes per block
  bool quantized;
};

// nullopt for ids we do not support (IQ*, TQ*, removed types): callers turn that into a Status.
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type);
inline std::optional<DTypeInfo> dtype_info(DType t) { return dtype_info(static_cast<uint32_t>(t)); }

// Bytes of a row of `n` elements; nullopt when n is not a multiple of the block size.
std::optional<size_t> row_bytes(DType t, int64_t n);

std::string_view dtype_name(DType t);

}  // namespace kvasir
