// QuantizedWeightSource: an HF checkpoint's weights as the model binds them when its
// quantization_config (or --quantization fp8) quantizes the linear layers. Every quantized
// linear's `<module>.weight` is checked against its scheme (dtype, scale tensors' shapes, dtypes
// and values, static input scales, KV-cache scales) when the source opens, and is presented as a
// float32 matrix: the stored codes times their scales, as the checkpoint's own dequantization
// computes them, so the CPU backend runs FP8 checkpoints on its float kernels as their reference.
// The scale tensors leave the name list; the KV-cache scales are kept here for the KV cache.
// Must not know model families or run ops: modules are found by tensor names alone.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/weight_source.h"
#include "quant/quantization_config.h"

namespace kvasir::quant {

// One quantized linear as the checkpoint stores it (plain data; views into the inner source).
struct QuantizedLinear {
  const QuantScheme* scheme = nullptr;  // points into the source's QuantizationConfig
  WeightTensor weight;                  // [out, in] codes (FP8), or the float weight (online)
  WeightTensor weight_scale;            // [] / [1], [out] / [out, 1], or [ceil(out/br), ceil(in/bc)]
  float input_scale = 0.0f;             // static activation scale; 0 when dynamic or weight-only
};

// K and V scales of one attention module (compressed-tensors' kv_cache_scheme).
struct KvCacheScales {
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Wraps `inner` (an HF safetensors source) under `config`; integer weight-only formats (GPTQ, AWQ,
// pack-quantized) go to IntQuantizedWeightSource (int_quantized_weight_source.h). InvalidArgument / DataLoss naming the
// first tensor that disagrees with the config; Unimplemented for dtypes no scheme here reads.
StatusOr<std::unique_ptr<WeightSource>> open_quantized_weights(std::unique_ptr<WeightSource> inner,
                                                               QuantizationConfig config);

// What the source found, for the backends that run FP8 natively and for tests: the quantized
// linears by module name and the KV-cache scales by attention module. Null when `src` is not a
// quantized source.
const std::map<std::string, QuantizedLinear>* quantized_linears(const WeightSource& src);
const std::map<std::string, KvCacheScales>* kv_cache_scales(const WeightSource& src);
const QuantizationConfig* quantization_of(const WeightSource& src);

}  // namespace kvasir::quant
