#include "model/weight_binding.h"

#include <cstring>

#include "backend/host_buffer.h"
#include "quant/dequantize.h"

namespace kvasir {

StatusOr<WeightTensor> WeightBinder::find(const std::string& gguf_name, const std::string& hf_name) const {
  if (src_.has_tensor(gguf_name)) return src_.tensor(gguf_name);
  if (src_.has_tensor(hf_name)) return src_.tensor(hf_name);
  return not_found("model weight missing: " + gguf_name + " (HF name " + hf_name + ")");
}

StatusOr<Tensor> WeightBinder::upload(const WeightTensor& w) {
  if (!dtype_info(w.dtype)) return unimplemented("unsupported dtype for weight " + w.name);
  Tensor host;
  host.dtype = w.dtype;
  host.ndim = static_cast<int>(w.shape.size());
  for (int i = 0; i < host.ndim; ++i) host.shape[static_cast<size_t>(i)] = w.shape[static_cast<size_t>(i)];
  host.data = const_cast<uint8_t*>(w.data);
  // Kernels assume aligned rows; safetensors payloads can sit at any offset, so copy those.
  if (reinterpret_cast<uintptr_t>(w.data) % 32 != 0) {
    KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(w.nbytes));
    std::memcpy(buf->data(), w.data, w.nbytes);
    host.data = buf->data();
    owned_.push_back(std::move(buf));
  }
  std::unique_ptr<Buffer> owner;
  KVASIR_ASSIGN_OR_RETURN(Tensor t, backend_.upload_weight(host, &owner));
  if (owner) owned_.push_back(std::move(owner));
  return t;
}

StatusOr<Tensor> WeightBinder::matrix(const std::string& gguf_name, const std::string& hf_name) {
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, find(gguf_name, hf_name));
  if (w.shape.size() != 2) return data_loss("weight " + w.name + " must be 2-D");
  return upload(w);
}

StatusOr<Tensor> WeightBinder::to_f32_vector(const WeightTensor& w, float offset) {
  const int64_t n = w.num_elements();
  std::vector<float> host(static_cast<size_t>(n));
  // Dequantize through an aligned copy: the source may be unaligned (safetensors).
  std::vector<uint8_t> raw(w.data, w.data + w.nbytes);
  quant::dequantize_row(w.dtype, raw.data(), host.data(), n);
  for (float& f : host) f += offset;
  Tensor t = Tensor::make(host.data(), DType::kF32, {n});
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(static_cast<size_t>(n) * sizeof(float)));
  std::memcpy(buf->data(), host.data(), host.size() * sizeof(float));
  t.data = buf->data();
  owned_.push_back(std::move(buf));
  std::unique_ptr<Buffer> owner;
  KVASIR_ASSIGN_OR_RETURN(Tensor dev, backend_.upload_weight(t, &owner));
  if (owner) owned_.push_back(std::move(owner));
  return dev;
}

StatusOr<Tensor> WeightBinder::norm(const std::string& gguf_name, const std::string& hf_name) {
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, find(gguf_name, hf_name));
  if (w.shape.size() != 1) return data_loss("norm weight " + w.name + " must be 1-D");
  // GGUF Gemma files store (1 + w) (offset 0); HF files store w and add 1 in the forward pass.
  return to_f32_vector(w, static_cast<float>(config_.norm_weight_offset));
}

StatusOr<Tensor> WeightBinder::optional_vector(const std::string& gguf_name, const std::string& hf_name) {
  if (!src_.has_tensor(gguf_name) && !src_.has_tensor(hf_name)) return Tensor{};
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, find(gguf_name, hf_name));
  return to_f32_vector(w, 0.0f);
}

Status WeightBinder::check_shapes(const Tensor& embed, const Tensor& lm_head, size_t num_layers) const {
  if (embed.dim(0) != config_.vocab_size || embed.dim(1) != config_.hidden_size) {
    return data_loss("token embedding shape does not match vocab_size x hidden_size");
  }
  if (lm_head.dim(0) != config_.vocab_size || lm_head.dim(1) != config_.hidden_size) {
    return data_loss("output projection shape does not match vocab_size x hidden_size");
  }
  return num_layers == static_cast<size_t>(config_.num_layers) ? Status() : data_loss("layer count mismatch");
}

}  // namespace kvasir
