#include "quant/int_quantized_weight_source.h"

#include <algorithm>
#include <cstdlib>

#include "quant/packed_int_tensors.h"

namespace kvasir::quant {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Every layout a config's groups use (a compressed-tensors config has one, GPTQ and AWQ one each).
std::vector<IntWeightLayout> layouts_of(const IntQuantConfig& c) {
  std::vector<IntWeightLayout> out;
  for (const auto& g : c.groups) {
    if (std::find(out.begin(), out.end(), g.scheme.layout) == out.end()) out.push_back(g.scheme.layout);
  }
  return out;
}

}  // namespace

void IntQuantizedWeightSource::AlignedFree::operator()(float* p) const { std::free(p); }

StatusOr<std::unique_ptr<WeightSource>> IntQuantizedWeightSource::wrap(std::unique_ptr<WeightSource> base,
                                                                       IntQuantConfig config) {
  std::unique_ptr<IntQuantizedWeightSource> src(new IntQuantizedWeightSource(std::move(base), std::move(config)));
  const std::vector<std::string> names = src->base_->tensor_names();
  for (IntWeightLayout layout : layouts_of(src->config_)) {
    const std::string marker = packed_int_marker_suffix(layout);
    for (const std::string& name : names) {
      if (!ends_with(name, marker)) continue;
      const std::string layer = name.substr(0, name.size() - marker.size());
      KVASIR_ASSIGN_OR_RETURN(const IntWeightScheme* scheme, src->config_.scheme_for(layer));
      if (scheme->layout != layout) continue;  // another group's layout marks its own layers
      KVASIR_ASSIGN_OR_RETURN(PackedIntWeight w, read_packed_int_weight(*src->base_, layer, *scheme));
      src->packed_.emplace(layer + ".weight", w);
      for (std::string& part : packed_int_tensor_names(layout, layer)) {
        if (src->base_->has_tensor(part)) src->hidden_.push_back(std::move(part));
      }
    }
  }
  if (src->packed_.empty()) {
    return invalid_argument(src->base_->path() + ": config.json names quant_method '" + src->config_.method +
                            "' but no tensor is packed in that format");
  }
  std::sort(src->hidden_.begin(), src->hidden_.end());
  return std::unique_ptr<WeightSource>(std::move(src));
}

std::vector<std::string> IntQuantizedWeightSource::tensor_names() const {
  std::vector<std::string> out;
  for (std::string& n : base_->tensor_names()) {
    if (!std::binary_search(hidden_.begin(), hidden_.end(), n)) out.push_back(std::move(n));
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
  const size_t n = static_cast<size_t>(w.out_features * w.in_features);
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mu_);
  auto d = dense_.find(name);
  if (d == dense_.end()) {
    // 64-byte aligned, so backends that read weights in place (the CPU) take it without a copy.
    float* data = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (data == nullptr) return resource_exhausted("cannot allocate the dequantized " + std::string(name));
    dequantize_packed_int(w, data);
    d = dense_.emplace(std::string(name), std::unique_ptr<float[], AlignedFree>(data)).first;
  }
  WeightTensor t;
  t.name = std::string(name);
  t.dtype = DType::kF32;
  t.shape = {w.out_features, w.in_features};
  t.data = reinterpret_cast<const uint8_t*>(d->second.get());
  t.nbytes = n * sizeof(float);
  return t;
}

}  // namespace kvasir::quant
