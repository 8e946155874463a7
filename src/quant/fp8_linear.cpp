// FP8 weight checks and dequantization. The product code * scale is one float32 multiply per
// element, as compressed-tensors' dequantize and DeepSeek's weight_dequant compute it in float32,
// so the matrix here is what HF transformers multiplies with.
#include "quant/fp8_linear.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/dequantize.h"
#include "quant/fp8.h"
#include "quant/tensor_check_text.h"

namespace kvasir::quant {
namespace {

bool is_float_scale_type(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// The scale tensor shapes a strategy allows (compressed-tensors writes [1] and [out, 1]; vLLM's
// fp8 checkpoints [] and [out]; both appear in the field).
bool scale_shape_ok(const std::vector<int64_t>& s, ScaleStrategy strategy, const std::vector<int64_t>& block,
                    int64_t out, int64_t in, std::string* want) {
  switch (strategy) {
    case ScaleStrategy::kTensor:
      *want = "[] or [1]";
      return s.empty() || s == std::vector<int64_t>{1};
    case ScaleStrategy::kChannel:
      *want = "[" + std::to_string(out) + ", 1] or [" + std::to_string(out) + "]";
      return s == std::vector<int64_t>{out, 1} || s == std::vector<int64_t>{out};
    case ScaleStrategy::kBlock: {
      const std::vector<int64_t> b = {ceil_div(out, block[0]), ceil_div(in, block[1])};
      *want = shape_text(b) + " (blocks of " + std::to_string(block[0]) + "x" + std::to_string(block[1]) + ")";
      return s == b;
    }
    default:
      *want = "a tensor, channel or block scale";
      return false;
  }
}

}  // namespace

float scale_at(const WeightTensor& s, int64_t i) {
  const size_t es = s.dtype == DType::kF32 ? 4 : 2;
  uint8_t raw[4] = {0, 0, 0, 0};
  std::memcpy(raw, s.data + static_cast<size_t>(i) * es, es);  // the source may be unaligned
  float v = 0.0f;
  dequantize_row(s.dtype, raw, &v, 1);
  return v;
}

Status check_fp8_linear(const std::string& module, const QuantizedLinear& l) {
  const WeightTensor& w = l.weight;
  const QuantArgs& args = *l.scheme->weights;
  if (w.shape.size() != 2 || w.shape[0] < 1 || w.shape[1] < 1) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + "; a quantized linear weight is [out, in]");
  }
  const int64_t out = w.shape[0], in = w.shape[1];
  if (const auto& a = l.scheme->input_activations; a && a->strategy == ScaleStrategy::kGroup && in % a->group_size != 0) {
    return data_loss("weight " + w.name + " has " + std::to_string(in) + " input columns, not a multiple of the activation group size " +
                     std::to_string(a->group_size));
  }
  if (l.scheme->format == "online") {
    // No host data: dummy weights a device makes itself (the CUDA backend makes FP8 codes).
    if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16) {
      return unimplemented("--quantization fp8: weight " + w.name + " is " + std::string(dtype_name(w.dtype)) +
                           "; only float32, bfloat16 and float16 weights are quantized at load");
    }
    return Status();
  }
  if (w.dtype != DType::kF8E4M3) {
    return data_loss("weight " + w.name + " is " + std::string(dtype_name(w.dtype)) + ", but the quantization_config (" +
                     l.scheme->format + ") stores it as float8_e4m3fn");
  }
  const WeightTensor& s = l.weight_scale;
  if (s.name.empty()) return data_loss("quantized weight " + w.name + " has no scale tensor (" + module + ".weight_scale)");
  if (!is_float_scale_type(s.dtype)) {
    return data_loss("scale " + s.name + " is " + std::string(dtype_name(s.dtype)) + "; scales are float32, bfloat16 or float16");
  }
  std::string want;
  if (!scale_shape_ok(s.shape, args.strategy, args.block_structure, out, in, &want)) {
    return data_loss("scale " + s.name + " has shape " + shape_text(s.shape) + "; '" + scale_strategy_name(args.strategy) +
                     "' scales of the " + shape_text(w.shape) + " weight must be " + want);
  }
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    const float v = scale_at(s, i);
    if (!std::isfinite(v) || v < 0.0f) {
      return data_loss("scale " + s.name + " element " + std::to_string(i) + " is " + std::to_string(v) +
                       "; scales must be finite and not negative");
    }
  }
  return Status();
}

void dequantize_fp8_linear(const QuantizedLinear& l, float* dst) {
  const WeightTensor& w = l.weight;
  const int64_t out = w.shape[0], in = w.shape[1];
  if (l.scheme->format == "online") {
    const size_t rb = w.nbytes / static_cast<size_t>(out);
    std::vector<uint8_t> raw(rb);
    for (int64_t r = 0; r < out; ++r) {
      float* row = dst + r * in;
      std::memcpy(raw.data(), w.data + static_cast<size_t>(r) * rb, rb);
      dequantize_row(w.dtype, raw.data(), row, in);
      float amax = 0.0f;
      for (int64_t c = 0; c < in; ++c) amax = std::fmax(amax, std::fabs(row[c]));
      const float scale = amax / kFp8E4m3Max;
      for (int64_t c = 0; c < in; ++c) {
        row[c] = scale == 0.0f ? 0.0f : fp8_e4m3_to_f32(f32_to_fp8_e4m3(row[c] / scale)) * scale;
      }
    }
    return;
  }
  const QuantArgs& args = *l.scheme->weights;
  std::vector<float> scales(static_cast<size_t>(l.weight_scale.num_elements()));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = scale_at(l.weight_scale, static_cast<int64_t>(i));
  const int64_t block_rows = args.strategy == ScaleStrategy::kBlock ? args.block_structure[0] : 1;
  const int64_t block_cols = args.strategy == ScaleStrategy::kBlock ? args.block_structure[1] : in;
  const int64_t blocks_per_row = (in + block_cols - 1) / block_cols;
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* codes = w.data + static_cast<size_t>(r * in);
    float* row = dst + r * in;
    for (int64_t c = 0; c < in; ++c) {
      size_t si = 0;  // kTensor
      if (args.strategy == ScaleStrategy::kChannel) si = static_cast<size_t>(r);
      if (args.strategy == ScaleStrategy::kBlock) si = static_cast<size_t>((r / block_rows) * blocks_per_row + c / block_cols);
      row[c] = fp8_e4m3_to_f32(codes[c]) * scales[si];
    }
  }
}

std::vector<float> fp8_row_scales(const QuantizedLinear& l) {
  const WeightTensor& w = l.weight;
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<float> scales(static_cast<size_t>(out));
  if (l.scheme->format == "online") {
    // The same amax dequantize_fp8_linear takes, so code x scale reproduces its matrix.
    const size_t rb = w.nbytes / static_cast<size_t>(out);
    std::vector<uint8_t> raw(rb);
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t r = 0; r < out; ++r) {
      std::memcpy(raw.data(), w.data + static_cast<size_t>(r) * rb, rb);
      dequantize_row(w.dtype, raw.data(), row.data(), in);
      float amax = 0.0f;
      for (float v : row) amax = std::fmax(amax, std::fabs(v));
      scales[static_cast<size_t>(r)] = amax / kFp8E4m3Max;
    }
    return scales;
  }
  const QuantArgs& args = *l.scheme->weights;
  if (w.dtype != DType::kF8E4M3 || args.strategy == ScaleStrategy::kBlock) return {};
  for (int64_t r = 0; r < out; ++r) {
    scales[static_cast<size_t>(r)] = scale_at(l.weight_scale, args.strategy == ScaleStrategy::kChannel ? r : 0);
  }
  return scales;
}

}  // namespace kvasir::quant
