#include "quant/int_quantized_weight_source.h"

#include <algorithm>
#include <cstdlib>

#include "quant/packed_int_blocks.h"
#include "quant/packed_int_tensors.h"

namespace kvasir::quant {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A matrix the model reads as a linear layer's weight (not an embedding), as quantized_weight_source
// tells them apart: by name and rank alone.
bool is_linear_weight(const WeightTensor& w, const std::string& module) {
  if (w.shape.size() != 2) return false;
  const std::string last = module.substr(module.find_last_of('.') + 1);
  return last.find("embed") == std::string::npos && last != "wte" && last != "wpe";
}

}  // namespace

void IntQuantizedWeightSource::AlignedFree::operator()(uint8_t* p) const { std::free(p); }

StatusOr<std::unique_ptr<WeightSource>> IntQuantizedWeightSource::wrap(std::unique_ptr<WeightSource> base,
                                                                       QuantizationConfig config) {
  for (const QuantScheme& s : config.schemes) {
    if (!is_int_weight_format(s.format)) {
      return unimplemented(base->path() + ": the quantization_config mixes format '" + s.format +
                           "' with integer weight-only formats");
    }
  }
  std::unique_ptr<IntQuantizedWeightSource> src(new IntQuantizedWeightSource(std::move(base), std::move(config)));
  KVASIR_RETURN_IF_ERROR(src->find_packed_layers());
  return std::unique_ptr<WeightSource>(std::move(src));
}

Status IntQuantizedWeightSource::find_packed_layers() {
  const std::vector<std::string> names = base_->tensor_names();
  for (const std::string& name : names) {
    const std::string marker = ends_with(name, ".qweight")         ? ".qweight"
                               : ends_with(name, ".weight_packed") ? ".weight_packed"
                                                                   : "";
    if (marker.empty()) continue;
    const std::string layer = name.substr(0, name.size() - marker.size());
    const QuantScheme* scheme = scheme_for_module(config_, layer, /*is_linear=*/true);
    if (scheme == nullptr) {
      return data_loss("layer " + layer + " holds packed " + config_.method +
                       " tensors, but the quantization_config ignores or does not target it");
    }
    KVASIR_ASSIGN_OR_RETURN(IntWeightScheme s, int_weight_scheme(*scheme));
    if (marker != packed_int_marker_suffix(s.layout)) {
      return data_loss("tensor " + name + " is not part of format '" + scheme->format + "', which " + layer + " has");
    }
    KVASIR_ASSIGN_OR_RETURN(PackedIntWeight w, read_packed_int_weight(*base_, layer, s));
    packed_.emplace(layer + ".weight", w);
    for (std::string& part : packed_int_tensor_names(s.layout, layer)) {
      if (base_->has_tensor(part)) hidden_.push_back(std::move(part));
    }
  }
  if (packed_.empty()) {
    return invalid_argument(base_->path() + ": config.json names quant_method '" + config_.method +
                            "' but no tensor is packed in that format");
  }
  std::sort(hidden_.begin(), hidden_.end());
  // A packed layer's part without its qweight / weight_packed: the layer was left half written.
  for (const std::string& name : names) {
    if (std::binary_search(hidden_.begin(), hidden_.end(), name)) continue;
    for (const char* part : {".qzeros", ".scales", ".g_idx", ".weight_shape", ".weight_g_idx", ".weight_scale",
                             ".weight_zero_point"}) {
      if (ends_with(name, part)) {
        return data_loss("tensor " + name + " belongs to no packed layer (its .qweight / .weight_packed is missing)");
      }
    }
  }
  // compressed-tensors lists what it left unquantized: a targeted linear stored dense contradicts it.
  if (config_.method != "compressed-tensors") return Status();
  for (const std::string& name : names) {
    if (!ends_with(name, ".weight") || packed_.count(name) != 0) continue;
    const std::string module = name.substr(0, name.size() - 7);
    KVASIR_ASSIGN_OR_RETURN(WeightTensor w, base_->tensor(name));
    if (is_linear_weight(w, module) && scheme_for_module(config_, module, true) != nullptr) {
      return data_loss("weight " + name + " is stored dense, but the quantization_config packs " + module +
                       " (it is not in 'ignore')");
    }
  }
  return Status();
}

StatusOr<std::unique_ptr<WeightSource>> IntQuantizedWeightSource::wrap_dummy(std::unique_ptr<WeightSource> base,
                                                                             QuantizationConfig config) {
  for (const QuantScheme& s : config.schemes) {
    if (!is_int_weight_format(s.format)) {
      return unimplemented(base->path() + ": the quantization_config mixes format '" + s.format +
                           "' with integer weight-only formats");
    }
  }
  std::unique_ptr<IntQuantizedWeightSource> src(new IntQuantizedWeightSource(std::move(base), std::move(config)));
  for (const std::string& name : src->base_->tensor_names()) {
    if (!ends_with(name, ".weight")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    KVASIR_ASSIGN_OR_RETURN(WeightTensor w, src->base_->tensor(name));
    // lm_head stays dense, as GPTQ / AWQ / llm-compressor leave it in real checkpoints.
    if (!is_linear_weight(w, module) || module.substr(module.find_last_of('.') + 1) == "lm_head") continue;
    const QuantScheme* scheme = scheme_for_module(src->config_, module, /*is_linear=*/true);
    if (scheme == nullptr) continue;
    if (w.data != nullptr) {
      return unimplemented("--load-format dummy with quant_method '" + src->config_.method + "': weight " + name +
                           " has host values; dummy integer weights are made on a GPU backend (--device cuda), "
                           "which fills the packed codes itself");
    }
    KVASIR_ASSIGN_OR_RETURN(IntWeightScheme s, int_weight_scheme(*scheme));
    PackedIntWeight p;
    p.layout = s.layout;
    p.bits = s.bits;
    p.out_features = w.shape[0];
    p.in_features = w.shape[1];
    p.group_size = s.group_size == -1 ? p.in_features : s.group_size;
    p.num_groups = (p.in_features + p.group_size - 1) / p.group_size;
    p.zero_offset = s.zero_offset;
    src->packed_.emplace(name, p);
  }
  if (src->packed_.empty()) {
    return invalid_argument(src->base_->path() + ": quant_method '" + src->config_.method +
                            "' targets none of the dummy model's linear weights");
  }
  return std::unique_ptr<WeightSource>(std::move(src));
}

std::vector<std::string> IntQuantizedWeightSource::tensor_names() const {
  std::vector<std::string> out;
  for (std::string& n : base_->tensor_names()) {
    // (wrap_dummy's weights keep their base names: listed once, below.)
    if (!std::binary_search(hidden_.begin(), hidden_.end(), n) && packed_.count(n) == 0) out.push_back(std::move(n));
  }
  for (const auto& [name, w] : packed_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

bool IntQuantizedWeightSource::has_tensor(std::string_view name) const {
  if (packed_.count(name) != 0) return true;
  if (std::binary_search(hidden_.begin(), hidden_.end(), name)) return false;
  return base_->has_tensor(name);
}

const PackedIntWeight* IntQuantizedWeightSource::packed(std::string_view weight_name) const {
  auto it = packed_.find(weight_name);
  return it == packed_.end() ? nullptr : &it->second;
}

StatusOr<WeightTensor> IntQuantizedWeightSource::tensor(std::string_view name) const {
  auto it = packed_.find(name);
  if (it == packed_.end()) {
    if (std::binary_search(hidden_.begin(), hidden_.end(), name)) {
      return not_found("tensor " + std::string(name) + " is part of a packed layer; ask for its .weight");
    }
    return base_->tensor(name);
  }
  const PackedIntWeight& w = it->second;
  if (w.qweight == nullptr) {
    // Dummy weights (wrap_dummy): the base's tensor, no values; the scheme rides along.
    KVASIR_ASSIGN_OR_RETURN(WeightTensor t, base_->tensor(name));
    t.packed_int = &w;
    return t;
  }
  // GGML blocks where they hold the values exactly (packed_int_blocks.h), else float32.
  const DType type = exact_block_format(w).value_or(DType::kF32);
  const size_t nbytes = row_bytes(type, w.in_features).value() * static_cast<size_t>(w.out_features);
  std::lock_guard<std::mutex> lock(mu_);
  auto d = dense_.find(name);
  if (d == dense_.end()) {
    // 64-byte aligned, so backends that read weights in place (the CPU) take it without a copy.
    auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, (nbytes + 63) / 64 * 64));
    if (data == nullptr) return resource_exhausted("cannot allocate the dequantized " + std::string(name));
    if (type == DType::kF32) {
      dequantize_packed_int(w, reinterpret_cast<float*>(data));
    } else {
      packed_int_to_blocks(w, type, data);
    }
    d = dense_.emplace(std::string(name), std::unique_ptr<uint8_t[], AlignedFree>(data)).first;
  }
  WeightTensor t;
  t.name = std::string(name);
  t.dtype = type;
  t.shape = {w.out_features, w.in_features};
  t.data = d->second.get();
  t.nbytes = nbytes;
  t.packed_int = &w;
  return t;
}

const PackedIntWeight* packed_int_weight(const WeightSource& src, std::string_view weight_name) {
  const auto* q = dynamic_cast<const IntQuantizedWeightSource*>(&src);
  return q ? q->packed(weight_name) : nullptr;
}

}  // namespace kvasir::quant
