#include "quant/int_weight_scheme.h"

namespace kvasir::quant {

bool is_int_weight_format(const std::string& format) {
  return format == "gptq" || format == "gptq_v2" || format == "awq" || format == "pack-quantized";
}

StatusOr<IntWeightScheme> int_weight_scheme(const QuantScheme& s) {
  if (!is_int_weight_format(s.format) || !s.weights || s.weights->type != NumberType::kInt) {
    return invalid_argument("format '" + s.format + "' is not an integer weight-only format");
  }
  const QuantArgs& w = *s.weights;
  IntWeightScheme out;
  out.layout = s.format == "awq"              ? IntWeightLayout::kAwqGemm
               : s.format == "pack-quantized" ? IntWeightLayout::kPackQuantized
                                              : IntWeightLayout::kGptq;
  out.bits = w.num_bits;
  out.group_size = w.strategy == ScaleStrategy::kGroup ? w.group_size : -1;
  // compressed-tensors: "group" (and its alias "dynamic") store weight_g_idx; "weight" / "static"
  // only changed the order the quantizer visited columns.
  out.desc_act = w.actorder == "group" || w.actorder == "dynamic";
  out.sym = w.symmetric;
  out.zero_offset = s.format == "gptq" ? 1 : 0;
  return out;
}

}  // namespace kvasir::quant
