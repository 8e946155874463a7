// FP8 linear weights as checkpoints store them: the checks a quantized linear's tensors must pass
// for its scheme (codes' dtype, the scale tensor's shape for its strategy, scale values, static
// input scales), and the float32 matrix they stand for. Also the online scheme (--quantization
// fp8): per-channel float8_e4m3fn quantization of a float weight, then the same dequantization, so
// the CPU computes with exactly the weights an FP8 GPU kernel would read.
// Must not find tensors by name or hold buffers: quantized_weight_source does.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "quant/quantized_weight_source.h"

namespace kvasir::quant {

// `l.weight`, `l.weight_scale` and `l.input_scale` against `l.scheme`; errors name `module`.
Status check_fp8_linear(const std::string& module, const QuantizedLinear& l);

// dst[out * in] = the weight in float32 (row-major [out, in]): codes * scales for a stored FP8
// weight, quantize-then-dequantize per channel for the online scheme (scale = max|row| / 448,
// code = e4m3(w / scale)).
void dequantize_fp8_linear(const QuantizedLinear& l, float* dst);

// The per-output-row scales of `l` ([out], a per-tensor scale repeated) such that the matrix
// dequantize_fp8_linear gives is exactly e4m3 codes x these scales, for backends that keep the
// codes; empty where no such scales exist (block scales, e5m2 codes). Online: max|row| / 448.
std::vector<float> fp8_row_scales(const QuantizedLinear& l);

// A float32 value of a one-element (or [n] / [n, 1]) F32 / BF16 / F16 scale tensor, element i.
float scale_at(const WeightTensor& s, int64_t i);

}  // namespace kvasir::quant
