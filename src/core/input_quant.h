// InputQuant: how a linear layer's input activations are quantized to FP8 before its matmul
// (compressed-tensors W8A8 and fp8 checkpoints, --quantization fp8). Plain data that travels with
// the weight (WeightTensor -> Tensor), so each backend applies it where it multiplies: the CPU
// rounds the input to float8_e4m3fn and back (quant/fp8_activations.h), the CUDA backend's FP8
// GEMM quantizes for real (its decode-sized GEMV keeps bf16 inputs). Must not hold kernels.
#pragma once

#include <cstdint>

namespace kvasir {

struct InputQuant {
  enum class Kind : uint8_t {
    kNone,
    kStaticTensor,  // one stored scale for every token
    kDynamicToken,  // each row: scale = max|row| / 448
    kDynamicGroup,  // each row, per group_size columns: scale = max|group| / 448
  };
  Kind kind = Kind::kNone;
  int32_t group_size = 0;  // kDynamicGroup
  float scale = 0.0f;      // kStaticTensor
};

}  // namespace kvasir
