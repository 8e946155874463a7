// WeightBinder: finds a model's weights in a WeightSource under their GGUF or HF name, checks
// shapes and types, and makes them backend tensors (in place on the CPU, uploaded on a GPU).
// Norm vectors become float32 (with Gemma's +1 applied for HF files). Must not run any op.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/model_config.h"
#include "loader/weight_source.h"

namespace kvasir {

class WeightBinder {
 public:
  WeightBinder(const WeightSource& src, Backend& backend, const ModelConfig& config,
               std::vector<std::unique_ptr<Buffer>>& owned)
      : src_(src), backend_(backend), config_(config), owned_(owned) {}

  // A 2-D weight [out, in] in any supported dtype.
  StatusOr<Tensor> matrix(const std::string& gguf_name, const std::string& hf_name);
  // A 1-D norm weight as float32.
  StatusOr<Tensor> norm(const std::string& gguf_name, const std::string& hf_name);
  // A 1-D float32 vector (bias), or an empty Tensor when absent.
  StatusOr<Tensor> optional_vector(const std::string& gguf_name, const std::string& hf_name);
  Status check_shapes(const Tensor& embed, const Tensor& lm_head, size_t num_layers) const;

 private:
  StatusOr<WeightTensor> find(const std::string& gguf_name, const std::string& hf_name) const;
  StatusOr<Tensor> to_f32_vector(const WeightTensor& w, float offset);
  StatusOr<Tensor> upload(const WeightTensor& w);

  const WeightSource& src_;
  Backend& backend_;
  const ModelConfig& config_;
  std::vector<std::unique_ptr<Buffer>>& owned_;
};

}  // namespace kvasir
