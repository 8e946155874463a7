// WeightTensor: the plain description of one weight as it lies in a mapped file (GGUF or
// safetensors), handed from the loader to the model. It points into memory owned by the source
// that produced it and must not outlive that source; it never owns or converts bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/input_quant.h"

namespace kvasir {

namespace quant {
struct PackedIntWeight;
}

struct WeightTensor {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major: shape.back() is the contiguous dimension (GGUF's ne[0]). For quantized dtypes the
  // blocks run along shape.back(). A weight matrix is [out_features, in_features] in both formats.
  std::vector<int64_t> shape;
  // Not necessarily aligned to the element size (safetensors headers have arbitrary lengths):
  // read through memcpy or copy to an aligned buffer.
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  // Set by quant's QuantizedWeightSource on linears whose inputs the scheme quantizes.
  InputQuant input_quant;
  // Set by QuantizedWeightSource on FP8 linears with per-tensor or per-channel weight scales
  // ([out_features] float32, owned by the source): `data` (float32) is exactly codes x these row
  // scales, so a backend with FP8 kernels recovers the e4m3 codes (block-scaled weights leave it
  // null). Only valid for the whole matrix: a row or column slice must drop it.
  const float* fp8_row_scales = nullptr;
  // Set by quant's IntQuantizedWeightSource on integer weight-only linears (GPTQ, AWQ,
  // pack-quantized; owned by the source): the packed tensors `data` was dequantized from, which a
  // backend with int4 kernels keeps instead. data == nullptr with it set: dummy weights of that
  // scheme (no codes; the backend fills its own). Only valid for the whole matrix.
  const quant::PackedIntWeight* packed_int = nullptr;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // sources validated that this product does not overflow
    return n;
  }
};

}  // namespace kvasir
