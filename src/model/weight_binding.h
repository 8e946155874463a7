// WeightBinder: binds the weights a WeightManifest lists, finding each in a WeightSource under its
// GGUF or HF name (a fused tensor's row range becomes a row-slice view of it), checking shapes and
// types, and making them backend tensors (in place on the CPU, uploaded on a GPU). Norm vectors
// become float32 (with Gemma's +1 applied for HF files). Must not run any op.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/model_config.h"
#include "loader/weight_source.h"
#include "model/blocks.h"
#include "model/weight_manifest.h"

namespace kvasir {

class WeightBinder {
 public:
  WeightBinder(const WeightSource& src, Backend& backend, const ModelConfig& config,
               std::vector<std::unique_ptr<Buffer>>& owned)
      : src_(src), backend_(backend), config_(config), owned_(owned) {}

  // Every weight of `specs` by role; an optional weight that is absent is left out. NotFound
  // names the first required weight missing, DataLoss the first with the wrong shape.
  StatusOr<LayerWeights> bind(const std::vector<WeightSpec>& specs);
  // DataLoss naming the first weight of `specs` that the source holds: for weights the config
  // says the model does not have (the layer after its last), which a config that disagrees with
  // its checkpoint would otherwise leave unread.
  Status expect_absent(const std::vector<WeightSpec>& specs, const std::string& why) const;

 private:
  StatusOr<Tensor> bind_one(const WeightSpec& spec);
  // The tensor `name` names, or with an outer slice its spec.shape[0] entries of the first
  // dimension from name.outer_begin (a view: no copy). DataLoss when the first dimension is not
  // name.full_outer.
  StatusOr<WeightTensor> read(const WeightSpec& spec, const WeightName& name) const;
  // The spec's name in this source (GGUF first), or nullptr when neither is present.
  const WeightName* locate(const WeightSpec& spec) const;
  StatusOr<Tensor> fused_rows(const WeightSpec& spec, const WeightName& name);
  // A matrix stored in-features first: its [out, in] (of every matrix of a stack), copied out at
  // load; a row range takes a rank's out-features, a column slice its in-features.
  StatusOr<Tensor> transposed_matrix(const WeightSpec& spec, const WeightName& name);
  // A tensor-parallel rank's columns of a matrix: copied out row by row (whole blocks only).
  StatusOr<Tensor> column_slice(const WeightSpec& spec, const WeightName& name);
  // A tensor-parallel rank's rows of every matrix of a stack (experts): copied out.
  StatusOr<Tensor> stacked_rows(const WeightSpec& spec, const WeightName& name);
  // A tensor-parallel rank's elements of a bias (of every bias of an [E, n] stack).
  StatusOr<Tensor> bias_range(const WeightSpec& spec, const WeightName& name);
  StatusOr<Tensor> to_f32_vector(const WeightTensor& w, float offset);
  // kHostMatrix: float32 on the host, owned here, never uploaded.
  StatusOr<Tensor> to_f32_host(const WeightTensor& w);
  // `keep_fp8`: w is a whole matrix as its source gave it, so its fp8_row_scales (or packed_int)
  // still describe it and go to the backend (slices drop them: the backend then keeps the float values).
  StatusOr<Tensor> upload(const WeightTensor& w, bool vocab_table = false, bool keep_fp8 = false);

  const WeightSource& src_;
  Backend& backend_;
  const ModelConfig& config_;
  std::vector<std::unique_ptr<Buffer>>& owned_;
  std::map<std::string, Tensor> fused_;  // fused tensors uploaded once, by name
};

}  // namespace kvasir
