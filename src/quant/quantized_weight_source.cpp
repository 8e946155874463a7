// The quantized view of an HF checkpoint: finds each quantized linear by its tensors' names
// (`<module>.weight` with `.weight_scale` / `.weight_scale_inv` / `.input_scale` beside it),
// checks them all when opened, and dequantizes a weight the first time the model asks for it.
#include "quant/quantized_weight_source.h"

#include <cmath>
#include <new>
#include <set>

#include "quant/fp8_linear.h"
#include "quant/int_quantized_weight_source.h"

namespace kvasir::quant {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip(const std::string& s, std::string_view suffix) { return s.substr(0, s.size() - suffix.size()); }

// An embedding table is a 2-D `.weight` too, but no linear-layer scheme covers it.
bool is_linear_weight(const WeightTensor& w, const std::string& module) {
  if (w.shape.size() != 2) return false;
  const std::string last = module.substr(module.find_last_of('.') + 1);
  return last.find("embed") == std::string::npos && last != "wte" && last != "wpe";
}


// A one-element, finite, positive float scale (static input scales and KV-cache scales).
StatusOr<float> positive_scalar(const WeightTensor& s) {
  if (s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16) {
    return data_loss("scale " + s.name + " is " + std::string(dtype_name(s.dtype)) + "; scales are float32, bfloat16 or float16");
  }
  if (s.num_elements() != 1 || s.shape.size() > 1) {
    return data_loss("scale " + s.name + " must hold one value (shape [] or [1])");
  }
  const float v = scale_at(s, 0);
  if (!std::isfinite(v) || v <= 0.0f) {
    return data_loss("scale " + s.name + " is " + std::to_string(v) + "; it must be finite and positive");
  }
  return v;
}

InputQuant input_quant_of(const QuantizedLinear& l) {
  InputQuant q;
  const auto& a = l.scheme->input_activations;
  if (!a) return q;  // weight-only
  if (!a->dynamic) {
    q.kind = InputQuant::Kind::kStaticTensor;
    q.scale = l.input_scale;
  } else if (a->strategy == ScaleStrategy::kGroup) {
    q.kind = InputQuant::Kind::kDynamicGroup;
    q.group_size = static_cast<int32_t>(a->group_size);
  } else {
    q.kind = InputQuant::Kind::kDynamicToken;
  }
  return q;
}

struct AlignedFloats {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

class QuantizedWeightSource final : public WeightSource {
 public:
  QuantizedWeightSource(std::unique_ptr<WeightSource> inner, QuantizationConfig config)
      : inner_(std::move(inner)), config_(std::move(config)) {}

  Status open();

  WeightFormat format() const override { return inner_->format(); }
  const std::string& path() const override { return inner_->path(); }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> out;
    for (const std::string& n : inner_->tensor_names()) {
      if (!consumed_.count(n)) out.push_back(n);
    }
    return out;
  }
  bool has_tensor(std::string_view name) const override {
    return !consumed_.count(std::string(name)) && inner_->has_tensor(name);
  }
  StatusOr<WeightTensor> tensor(std::string_view name) const override;

  const std::map<std::string, QuantizedLinear>& linears() const { return linears_; }
  const std::map<std::string, KvCacheScales>& kv_scales() const { return kv_scales_; }
  const QuantizationConfig& config() const { return config_; }

 private:
  Status add_linear(const std::string& module, const WeightTensor& w, const QuantScheme& scheme);
  Status find_kv_cache_scales(const std::vector<std::string>& names);
  StatusOr<WeightTensor> optional_tensor(const std::string& name);

  std::unique_ptr<WeightSource> inner_;
  QuantizationConfig config_;
  std::map<std::string, QuantizedLinear> linears_;  // by module name
  std::map<std::string, KvCacheScales> kv_scales_;  // by attention module name
  std::set<std::string> consumed_;                  // scale tensors read here, hidden from the model
  // Dequantized weights by tensor name, made on first use: a fused weight is asked for more than once.
  mutable std::map<std::string, std::unique_ptr<float[], AlignedFloats>> dense_;
  // Their per-row FP8 scales (fp8_row_scales), for backends that keep the codes.
  mutable std::map<std::string, std::vector<float>> row_scales_;
};

StatusOr<WeightTensor> QuantizedWeightSource::optional_tensor(const std::string& name) {
  if (!inner_->has_tensor(name)) return WeightTensor{};
  consumed_.insert(name);
  return inner_->tensor(name);
}

Status QuantizedWeightSource::add_linear(const std::string& module, const WeightTensor& w, const QuantScheme& scheme) {
  QuantizedLinear l;
  l.scheme = &scheme;
  l.weight = w;
  if (scheme.format != "online") {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor scale, optional_tensor(module + ".weight_scale"));
    KVASIR_ASSIGN_OR_RETURN(WeightTensor scale_inv, optional_tensor(module + ".weight_scale_inv"));
    if (!scale_inv.name.empty()) {
      // DeepSeek's name for the same multiplier; compressed-tensors never writes it.
      if (scheme.format != "fp8" || !scale.name.empty()) {
        return data_loss("weight " + w.name + " has " + (scale.name.empty() ? "" : "both weight_scale and ") +
                         "weight_scale_inv, which the " + config_.method + " format does not use");
      }
      scale = scale_inv;
    }
    l.weight_scale = scale;
    KVASIR_ASSIGN_OR_RETURN(WeightTensor zero, optional_tensor(module + ".weight_zero_point"));
    if (!zero.name.empty()) return data_loss("weight " + w.name + " has a zero point; FP8 weights are symmetric");
    KVASIR_ASSIGN_OR_RETURN(WeightTensor input, optional_tensor(module + ".input_scale"));
    const bool static_input = scheme.input_activations && !scheme.input_activations->dynamic;
    if (static_input && input.name.empty()) {
      return data_loss("weight " + w.name + ": static activation quantization needs " + module + ".input_scale");
    }
    if (!static_input && !input.name.empty()) {
      return data_loss(input.name + " is in the checkpoint, but the quantization_config's activations are " +
                       (scheme.input_activations ? "dynamic" : "not quantized"));
    }
    if (static_input) {
      KVASIR_ASSIGN_OR_RETURN(l.input_scale, positive_scalar(input));
    }
  }
  KVASIR_RETURN_IF_ERROR(check_fp8_linear(module, l));
  linears_.emplace(module, l);
  return Status();
}

// K / V cache scales of each attention module, under the names vLLM reads
// (maybe_remap_kv_scale_name): `<attn>.k_scale` / `<attn>.v_scale` (compressed-tensors),
// `<attn>.k_proj.k_scale` / `<attn>.v_proj.v_scale` (ModelOpt) and the deprecated `<attn>.kv_scale`
// (one scale for both). compressed-tensors declares them (kv_cache_scheme: every attention module
// must then have both); vLLM's fp8 method reads any it finds (the others stay 1).
Status QuantizedWeightSource::find_kv_cache_scales(const std::vector<std::string>& names) {
  struct ScaleName {
    const char* suffix;  // after the attention module's name
    bool k, v;           // which scales it sets
  };
  static constexpr ScaleName kScaleNames[] = {{".k_proj.k_scale", true, false},
                                              {".v_proj.v_scale", false, true},
                                              {".kv_scale", true, true},
                                              {".k_scale", true, false},
                                              {".v_scale", false, true}};
  const bool declared = config_.kv_cache.has_value();
  std::set<std::string> attention_modules;
  std::map<std::string, std::pair<bool, bool>> found;  // module -> (k seen, v seen)
  for (const std::string& n : names) {
    for (const char* proj : {".k_proj.weight", ".qkv_proj.weight"}) {
      if (ends_with(n, proj)) attention_modules.insert(strip(n, proj));
    }
    for (const ScaleName& kv : kScaleNames) {
      if (!ends_with(n, kv.suffix)) continue;
      if (!declared && config_.method != "fp8") {
        return data_loss(n + " is in the checkpoint, but the quantization_config has no kv_cache_scheme");
      }
      KVASIR_ASSIGN_OR_RETURN(WeightTensor t, inner_->tensor(n));
      KVASIR_ASSIGN_OR_RETURN(float v, positive_scalar(t));
      const std::string module = strip(n, kv.suffix);
      auto& seen = found[module];
      if ((kv.k && seen.first) || (kv.v && seen.second)) {
        return data_loss(n + ": " + module + " has its K or V cache scale under two names");
      }
      KvCacheScales& s = kv_scales_[module];
      if (kv.k) {
        s.k_scale = v;
        seen.first = true;
      }
      if (kv.v) {
        s.v_scale = v;
        seen.second = true;
      }
      consumed_.insert(n);
      break;  // the first (longest) suffix that matches names it
    }
  }
  for (const auto& [m, s] : kv_scales_) {
    if (!attention_modules.count(m)) return data_loss(m + ".k_scale / .v_scale belong to no attention module");
  }
  if (!declared) return Status();
  for (const std::string& m : attention_modules) {
    auto it = found.find(m);
    if (it == found.end() || !it->second.first) {
      return data_loss("the quantization_config's kv_cache_scheme needs " + m + ".k_scale, which the checkpoint lacks");
    }
    if (!it->second.second) {
      return data_loss("the quantization_config's kv_cache_scheme needs " + m + ".v_scale, which the checkpoint lacks");
    }
  }
  return Status();
}

Status QuantizedWeightSource::open() {
  const std::vector<std::string> names = inner_->tensor_names();
  KVASIR_RETURN_IF_ERROR(find_kv_cache_scales(names));
  const bool online = !config_.schemes.empty() && config_.schemes[0].format == "online";
  for (const std::string& n : names) {
    if (!ends_with(n, ".weight")) continue;
    const std::string module = strip(n, ".weight");
    KVASIR_ASSIGN_OR_RETURN(WeightTensor w, inner_->tensor(n));
    const bool linear = is_linear_weight(w, module);
    const QuantScheme* scheme = scheme_for_module(config_, module, linear);
    if (is_fp8(w.dtype)) {
      if (scheme == nullptr) {
        return data_loss("weight " + n + " is " + std::string(dtype_name(w.dtype)) +
                         ", but the quantization_config ignores or does not target " + module);
      }
      KVASIR_RETURN_IF_ERROR(add_linear(module, w, *scheme));
    } else if (online && scheme != nullptr) {
      KVASIR_RETURN_IF_ERROR(add_linear(module, w, *scheme));
    } else if (scheme != nullptr && linear && config_.method == "compressed-tensors") {
      // compressed-tensors lists every unquantized linear in `ignore`; fp8 checkpoints (DeepSeek's
      // router, lm_head) leave theirs unnamed.
      return data_loss("weight " + n + " is " + std::string(dtype_name(w.dtype)) +
                       ", but the quantization_config quantizes " + module + " (it is not in 'ignore')");
    }
  }
  // A scale no linear claimed (a float weight's, or an orphan's) means the checkpoint and its
  // config disagree: refused rather than silently dropped.
  for (const std::string& n : names) {
    if (consumed_.count(n)) continue;
    for (const char* suffix : {".weight_scale", ".weight_scale_inv", ".input_scale", ".weight_zero_point"}) {
      if (ends_with(n, suffix)) {
        return data_loss(n + " is in the checkpoint, but " + strip(n, suffix) +
                         ".weight is not a quantized linear of the quantization_config");
      }
    }
  }
  return Status();
}

StatusOr<WeightTensor> QuantizedWeightSource::tensor(std::string_view name) const {
  const std::string key(name);
  if (consumed_.count(key)) return not_found("tensor " + key + " is a quantization scale, read at load");
  if (!ends_with(key, ".weight")) return inner_->tensor(name);
  auto it = linears_.find(strip(key, ".weight"));
  if (it == linears_.end()) return inner_->tensor(name);
  const QuantizedLinear& l = it->second;
  if (l.weight.data == nullptr) {
    // Dummy weights a device fills itself (--load-format dummy): no values to quantize here; the
    // input quantization tells the backend the weight is an FP8 linear.
    WeightTensor out = l.weight;
    out.input_quant = input_quant_of(l);
    out.dtype = DType::kF32;
    out.nbytes = static_cast<size_t>(l.weight.num_elements()) * sizeof(float);
    return out;
  }
  auto d = dense_.find(key);
  if (d == dense_.end()) {
    const size_t n = static_cast<size_t>(l.weight.num_elements());
    std::unique_ptr<float[], AlignedFloats> buf(static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t{64})));
    dequantize_fp8_linear(l, buf.get());
    d = dense_.emplace(key, std::move(buf)).first;
  }
  auto rs = row_scales_.find(key);
  if (rs == row_scales_.end()) rs = row_scales_.emplace(key, fp8_row_scales(l)).first;
  WeightTensor out = l.weight;
  out.input_quant = input_quant_of(l);
  out.fp8_row_scales = rs->second.empty() ? nullptr : rs->second.data();
  out.dtype = DType::kF32;
  out.data = reinterpret_cast<const uint8_t*>(d->second.get());
  out.nbytes = static_cast<size_t>(l.weight.num_elements()) * sizeof(float);
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<WeightSource>> open_quantized_weights(std::unique_ptr<WeightSource> inner,
                                                               QuantizationConfig config) {
  if (inner->format() == WeightFormat::kGguf) {
    return invalid_argument(inner->path() + ": a GGUF file is quantized by its tensor types; --quantization and "
                            "quantization_config apply to HF safetensors checkpoints");
  }
  for (const QuantScheme& s : config.schemes) {
    if (is_int_weight_format(s.format)) return IntQuantizedWeightSource::wrap(std::move(inner), std::move(config));
  }
  auto src = std::make_unique<QuantizedWeightSource>(std::move(inner), std::move(config));
  KVASIR_RETURN_IF_ERROR(src->open());
  return std::unique_ptr<WeightSource>(std::move(src));
}

const std::map<std::string, QuantizedLinear>* quantized_linears(const WeightSource& src) {
  const auto* q = dynamic_cast<const QuantizedWeightSource*>(&src);
  return q ? &q->linears() : nullptr;
}

const std::map<std::string, KvCacheScales>* kv_cache_scales(const WeightSource& src) {
  const auto* q = dynamic_cast<const QuantizedWeightSource*>(&src);
  return q ? &q->kv_scales() : nullptr;
}

const QuantizationConfig* quantization_of(const WeightSource& src) {
  const auto* q = dynamic_cast<const QuantizedWeightSource*>(&src);
  return q ? &q->config() : nullptr;
}

}  // namespace kvasir::quant
