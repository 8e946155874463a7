// WeightManifest: the one list of a model's weights, declared by its family (model_family.h):
// each weight's role, its name in a GGUF file and in an HF checkpoint (possibly as a row range of
// a fused tensor), its shape, and whether it may be absent. The binder (weight_binding.h), the
// forward pass (by role) and --load-format dummy (dummy_weight_specs) all read it. Must not hold
// tensor data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "loader/dummy_weights.h"

namespace kvasir {

enum class WeightKind {
  kMatrix,  // [out, in], any supported dtype, bound in place
  kNorm,    // [n], made float32 with the config's norm_weight_offset added
  kVector,  // [n], made float32 (biases)
  // Any shape, made float32 on the host and not uploaded: a block derives the weights it runs from
  // it at creation (MLA splits kv_b_proj into its absorbed per-head matrices).
  kHostMatrix,
};

// Where a weight lies in one file format: a whole tensor, or rows [row_begin, row_begin + rows)
// of a fused tensor with `fused_rows` rows (Phi-3's qkv_proj holds q, k and v). A matrix the
// format stores in-features first ([..., in, out]: HF GPT-OSS's stacked experts) is `transposed`:
// the binder turns it into the [..., out, in] of the spec once, at load, so no kernel sees it.
struct WeightName {
  std::string name;
  int64_t row_begin = -1;  // -1: the whole tensor
  int64_t fused_rows = 0;  // rows of the fused tensor (row_begin >= 0)
  bool transposed = false;
  // Columns [col_begin, col_begin + the spec's in-features) of a tensor with `full_cols` columns:
  // a tensor-parallel rank's part of a row-parallel matrix (copied out at load).
  int64_t col_begin = -1;
  int64_t full_cols = 0;
  // Entries [outer_begin, outer_begin + the spec's shape[0]) of the first dimension of a tensor
  // whose first dimension is `full_outer`: a rank's heads of a per-head stack, its experts under
  // expert parallelism (a contiguous range of the file, read in place). Combines with the others:
  // the row, column and transposed forms then apply to the entries taken.
  int64_t outer_begin = -1;
  int64_t full_outer = 0;
  bool fused() const { return row_begin >= 0; }
  bool column_slice() const { return col_begin >= 0; }
  bool outer_slice() const { return outer_begin >= 0; }
};

struct WeightSpec {
  // What the model calls it: the GGUF per-layer name without "blk.<i>." ("attn_q.weight"), or the
  // whole GGUF name for model-level weights ("token_embd.weight").
  std::string role;
  WeightName gguf;
  WeightName hf;
  WeightKind kind = WeightKind::kMatrix;
  std::vector<int64_t> shape;  // [out, in] for matrices ([E, out, in] stacked experts); [n] for vectors
  // May be absent from a checkpoint (bound only when present).
  bool optional = false;
  // The config says the checkpoint has it: --load-format dummy makes it.
  bool expected = true;
  // Matrices: read by Backend::linear only, so a backend may keep it in a form only its linear
  // reads (int4 codes of an integer weight-only checkpoint). False for the MoE experts, which the
  // moe_experts op reads in the backend's plain weight type.
  bool linear_only = true;
};

struct WeightManifest {
  std::vector<WeightSpec> model;                // embedding, final norm, output projection
  std::vector<std::vector<WeightSpec>> layers;  // [num_layers]

  // nullptr when the manifest has no such role.
  const WeightSpec* find(const std::vector<WeightSpec>& list, const std::string& role) const;
};

// The manifest of the generic decoder (model/decoder_model.h) for `c`: llama-style names, with the
// optional pieces the config asks for (biases, QK-norm, sandwich norms). Families start from it.
WeightManifest dense_decoder_manifest(const ModelConfig& c);

// Dummy weights (HF names, in manifest order) for every expected weight; a fused tensor is made
// once, at its first row range. matrices_on_device leaves the matrices for the backend to fill.
std::vector<DummyTensorSpec> dummy_weight_specs(const WeightManifest& m, const ModelConfig& c,
                                                bool matrices_on_device);

}  // namespace kvasir
