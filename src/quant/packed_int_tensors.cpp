#include "quant/packed_int_tensors.h"

#include <cstring>

#include "quant/tensor_check_text.h"

namespace kvasir::quant {

namespace {

int32_t load_i32(const uint8_t* base, int64_t index) {
  int32_t v;
  std::memcpy(&v, base + index * 4, 4);
  return v;
}

StatusOr<WeightTensor> require(const WeightSource& src, const std::string& name, const std::string& why) {
  if (!src.has_tensor(name)) return data_loss("tensor " + name + " is missing (" + why + ")");
  return src.tensor(name);
}

Status expect_dtype(const WeightTensor& t, std::initializer_list<DType> allowed) {
  std::string names;
  for (DType d : allowed) {
    if (t.dtype == d) return Status();
    names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  return data_loss("tensor " + t.name + " has type " + std::string(dtype_name(t.dtype)) + ", expected " + names);
}

Status expect_shape(const WeightTensor& t, const std::vector<int64_t>& want, const std::string& why) {
  if (t.shape == want) return Status();
  return data_loss("tensor " + t.name + " has shape " + shape_text(t.shape) + ", expected " + shape_text(want) + " (" +
                   why + ")");
}

Status expect_2d(const WeightTensor& t) {
  if (t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0) return Status();
  return data_loss("tensor " + t.name + " has shape " + shape_text(t.shape) + ", expected a non-empty matrix");
}

// Groups from the group size: -1 means one group of the whole row. GPTQ allows a ragged last group
// (AutoGPTQ writes ceil(in / group) of them); AutoAWQ and compressed-tensors quantize whole groups
// only, so a ragged one there means the file and the config disagree.
Status set_groups(PackedIntWeight& w, const IntWeightScheme& s, const std::string& tensor) {
  w.group_size = s.group_size == -1 ? w.in_features : s.group_size;
  w.num_groups = ceil_div(w.in_features, w.group_size);
  if (s.layout != IntWeightLayout::kGptq && w.in_features % w.group_size != 0) {
    return data_loss("tensor " + tensor + ": " + std::to_string(w.in_features) + " input columns are not whole groups of " +
                     std::to_string(w.group_size) + " (group_size), which " + int_weight_layout_name(s.layout) +
                     " requires");
  }
  return Status();
}

Status read_scales(const WeightSource& src, const std::string& name, PackedIntWeight& w,
                   const std::vector<int64_t>& want, const std::string& why) {
  KVASIR_ASSIGN_OR_RETURN(WeightTensor t, require(src, name, "the group scales"));
  KVASIR_RETURN_IF_ERROR(expect_dtype(t, {DType::kF16, DType::kBF16, DType::kF32}));
  KVASIR_RETURN_IF_ERROR(expect_shape(t, want, why));
  w.scales = t.data;
  w.scale_dtype = t.dtype;
  return Status();
}

// g_idx: the group of every input column, each in [0, num_groups); without act-order it must be the
// plain column / group_size (GPTQ writes it anyway), so it is dropped and kernels need not read it.
Status read_g_idx(const WeightSource& src, const std::string& name, const IntWeightScheme& s, PackedIntWeight& w) {
  if (!src.has_tensor(name)) {
    if (s.desc_act) return data_loss("tensor " + name + " is missing (act-order needs the group of every column)");
    return Status();
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor t, src.tensor(name));
  KVASIR_RETURN_IF_ERROR(expect_dtype(t, {DType::kI32}));
  KVASIR_RETURN_IF_ERROR(expect_shape(t, {w.in_features}, "one group index per input column"));
  for (int64_t k = 0; k < w.in_features; ++k) {
    const int32_t g = load_i32(t.data, k);
    if (g < 0 || g >= w.num_groups) {
      return data_loss("tensor " + name + ": column " + std::to_string(k) + " is in group " + std::to_string(g) +
                       ", outside [0, " + std::to_string(w.num_groups) + ")");
    }
    if (!s.desc_act && g != k / w.group_size) {
      return data_loss("tensor " + name + ": column " + std::to_string(k) + " is in group " + std::to_string(g) +
                       " but act-order is off (group " + std::to_string(k / w.group_size) + " expected)");
    }
  }
  if (s.desc_act) w.g_idx = t.data;
  return Status();
}

// Symmetric schemes imply zero = 2^(bits-1); kernels for them read no zeros, so a file whose zeros
// disagree would run differently there: refused.
Status check_symmetric_zeros(const PackedIntWeight& w, const IntWeightScheme& s, const std::string& name) {
  if (!s.sym || w.zeros == nullptr) return Status();
  const int32_t mid = 1 << (w.bits - 1);
  for (int64_t g = 0; g < w.num_groups; ++g) {
    for (int64_t o = 0; o < w.out_features; ++o) {
      const int32_t z = packed_int_zero(w, o, g);
      if (z != mid) {
        return data_loss("tensor " + name + ": the scheme is symmetric but row " + std::to_string(o) + ", group " +
                         std::to_string(g) + " has zero point " + std::to_string(z) + " (expected " +
                         std::to_string(mid) + ")");
      }
    }
  }
  return Status();
}

StatusOr<PackedIntWeight> read_gptq_or_awq(const WeightSource& src, const std::string& layer, const IntWeightScheme& s) {
  const bool gptq = s.layout == IntWeightLayout::kGptq;
  const int pack = 32 / s.bits;
  PackedIntWeight w;
  w.layout = s.layout;
  w.bits = s.bits;
  w.zero_offset = s.zero_offset;
  KVASIR_ASSIGN_OR_RETURN(WeightTensor qweight, require(src, layer + ".qweight", "the packed weights"));
  KVASIR_RETURN_IF_ERROR(expect_dtype(qweight, {DType::kI32}));
  KVASIR_RETURN_IF_ERROR(expect_2d(qweight));
  // GPTQ packs input columns down the rows of qweight; AWQ packs output columns along each row.
  w.in_features = gptq ? qweight.shape[0] * pack : qweight.shape[0];
  w.out_features = gptq ? qweight.shape[1] : qweight.shape[1] * pack;
  w.qweight = qweight.data;
  KVASIR_RETURN_IF_ERROR(set_groups(w, s, qweight.name));
  const std::string groups_why = std::to_string(w.num_groups) + " groups of " + std::to_string(w.group_size) +
                                 " of " + std::to_string(w.in_features) + " input columns";
  KVASIR_RETURN_IF_ERROR(read_scales(src, layer + ".scales", w, {w.num_groups, w.out_features}, groups_why));
  if (w.out_features % pack != 0) {
    return data_loss("tensor " + layer + ".scales: " + std::to_string(w.out_features) +
                     " output features do not pack into int32 zero points of " + std::to_string(pack));
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor qzeros, require(src, layer + ".qzeros", "the zero points"));
  KVASIR_RETURN_IF_ERROR(expect_dtype(qzeros, {DType::kI32}));
  KVASIR_RETURN_IF_ERROR(expect_shape(qzeros, {w.num_groups, w.out_features / pack}, groups_why));
  w.zeros = qzeros.data;
  if (gptq) {
    KVASIR_RETURN_IF_ERROR(read_g_idx(src, layer + ".g_idx", s, w));
  } else if (src.has_tensor(layer + ".g_idx")) {
    return data_loss("tensor " + layer + ".g_idx: AWQ layers have no act-order");
  }
  KVASIR_RETURN_IF_ERROR(check_symmetric_zeros(w, s, qzeros.name));
  return w;
}

StatusOr<PackedIntWeight> read_pack_quantized(const WeightSource& src, const std::string& layer,
                                              const IntWeightScheme& s) {
  const int pack = 32 / s.bits;
  PackedIntWeight w;
  w.layout = s.layout;
  w.bits = s.bits;
  KVASIR_ASSIGN_OR_RETURN(WeightTensor shape, require(src, layer + ".weight_shape", "the unpacked [out, in] shape"));
  KVASIR_RETURN_IF_ERROR(expect_dtype(shape, {DType::kI32, DType::kI64}));
  KVASIR_RETURN_IF_ERROR(expect_shape(shape, {2}, "[out_features, in_features]"));
  for (int i = 0; i < 2; ++i) {
    int64_t v;
    if (shape.dtype == DType::kI64) {
      std::memcpy(&v, shape.data + i * 8, 8);
    } else {
      v = load_i32(shape.data, i);
    }
    if (v < 1 || v > (int64_t{1} << 31)) {
      return data_loss("tensor " + shape.name + ": dimension " + std::to_string(i) + " is " + std::to_string(v));
    }
    (i == 0 ? w.out_features : w.in_features) = v;
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor packed, require(src, layer + ".weight_packed", "the packed weights"));
  KVASIR_RETURN_IF_ERROR(expect_dtype(packed, {DType::kI32}));
  KVASIR_RETURN_IF_ERROR(expect_shape(packed, {w.out_features, ceil_div(w.in_features, pack)},
                                      "weight_shape " + shape_text({w.out_features, w.in_features}) + " packed " +
                                          std::to_string(pack) + " per int32"));
  w.qweight = packed.data;
  KVASIR_RETURN_IF_ERROR(set_groups(w, s, packed.name));
  const std::string groups_why = std::to_string(w.num_groups) + " groups of " + std::to_string(w.group_size) +
                                 " of " + std::to_string(w.in_features) + " input columns";
  KVASIR_RETURN_IF_ERROR(read_scales(src, layer + ".weight_scale", w, {w.out_features, w.num_groups}, groups_why));
  const std::string zp = layer + ".weight_zero_point";
  if (s.sym) {
    if (src.has_tensor(zp)) return data_loss("tensor " + zp + ": the scheme is symmetric, so no zero points are stored");
  } else {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor zeros, require(src, zp, "asymmetric scheme"));
    KVASIR_RETURN_IF_ERROR(expect_dtype(zeros, {DType::kI32}));
    KVASIR_RETURN_IF_ERROR(expect_shape(zeros, {ceil_div(w.out_features, pack), w.num_groups},
                                        "zero points packed " + std::to_string(pack) + " per int32 along the rows"));
    w.zeros = zeros.data;
  }
  KVASIR_RETURN_IF_ERROR(read_g_idx(src, layer + ".weight_g_idx", s, w));
  return w;
}

}  // namespace

std::vector<std::string> packed_int_tensor_names(IntWeightLayout layout, const std::string& layer) {
  if (layout == IntWeightLayout::kPackQuantized) {
    return {layer + ".weight_packed", layer + ".weight_scale", layer + ".weight_shape", layer + ".weight_zero_point",
            layer + ".weight_g_idx"};
  }
  return {layer + ".qweight", layer + ".qzeros", layer + ".scales", layer + ".g_idx"};
}

const char* packed_int_marker_suffix(IntWeightLayout layout) {
  return layout == IntWeightLayout::kPackQuantized ? ".weight_packed" : ".qweight";
}

StatusOr<PackedIntWeight> read_packed_int_weight(const WeightSource& src, const std::string& layer,
                                                 const IntWeightScheme& scheme) {
  if (src.has_tensor(layer + ".weight")) {
    return data_loss("layer " + layer + " holds both a dense weight and " +
                     std::string(int_weight_layout_name(scheme.layout)) + " packed tensors");
  }
  if (scheme.layout == IntWeightLayout::kPackQuantized) return read_pack_quantized(src, layer, scheme);
  return read_gptq_or_awq(src, layer, scheme);
}

}  // namespace kvasir::quant
