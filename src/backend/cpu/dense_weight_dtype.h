// --dtype on the CPU: dense weight matrices (F32 / F16 / BF16, an HF directory's) converted once at
// upload to the element type asked for, as vLLM's CPU backend runs an f32 checkpoint in bf16.
// Activations stay float32; GGUF block formats keep their blocks (their matmuls quantize the
// activations instead, see cpu/quant/matmul.h). Must not touch 1-D tensors (norms, biases): the
// ops read those as float32.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kvasir {

// True when `w` is a matrix that convert_dense_weight would change for `to`.
bool dense_weight_converts(const Tensor& w, DType to);

// A copy of `w` in `to` (F32, F16 or BF16; round to nearest even), owned by *owner.
StatusOr<Tensor> convert_dense_weight(const Tensor& w, DType to, std::unique_ptr<Buffer>* owner);

}  // namespace kvasir
