// WeightSource: where a model gets its weights by name, whatever the file format: a GGUF file or
// an HF directory of safetensors shards. Tensor names are the format's own (GGUF
// "blk.0.attn_q.weight", HF "model.layers.0.self_attn.q_proj.weight"); mapping them is the model's
// business. Must not convert, copy or dequantize data: tensors point into the source's mappings.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loader/weight_tensor.h"

namespace kvasir {

class GgufFile;

enum class WeightFormat { kGguf, kSafetensors, kDummy };

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  virtual WeightFormat format() const = 0;
  // File or directory it was opened from.
  virtual const std::string& path() const = 0;
  virtual std::vector<std::string> tensor_names() const = 0;  // sorted
  virtual bool has_tensor(std::string_view name) const = 0;
  // NotFound when absent; the result stays valid while this source lives.
  virtual StatusOr<WeightTensor> tensor(std::string_view name) const = 0;
  // The GGUF file behind a GGUF source (its metadata holds the config and vocabulary), else null.
  virtual const GgufFile* gguf() const { return nullptr; }
};

// A .gguf file, an HF directory (model.safetensors.index.json or model.safetensors), or a single
// .safetensors file.
StatusOr<std::unique_ptr<WeightSource>> open_weights(const std::string& path);

StatusOr<std::unique_ptr<WeightSource>> open_gguf_weights(const std::string& path);
// A GGUF file already parsed (GgufFile::parse of bytes in memory: tests and fuzz targets).
std::unique_ptr<WeightSource> gguf_weight_source(std::unique_ptr<GgufFile> file);
StatusOr<std::unique_ptr<WeightSource>> open_safetensors_weights(const std::string& dir_or_file);

}  // namespace kvasir
