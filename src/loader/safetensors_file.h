// SafetensorsFile: a validating reader of one .safetensors file (Hugging Face's weight format)
// over a read-only mmap; SafetensorsShards: all shards of an HF model directory, through
// model.safetensors.index.json or a single model.safetensors. parse() checks the header length,
// the JSON, every dtype, shape and data range (inside the data section, sized to match, no
// overlaps), so any byte string yields a usable file or a Status naming the tensor at fault.
// Must not convert tensor data or interpret tensor names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mapped_file.h"
#include "common/status.h"
#include "core/dtype.h"
#include "loader/weight_tensor.h"

namespace kvasir {

class Json;

// Element types that may appear in a safetensors header.
enum class StDType {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

std::string_view st_dtype_name(StDType t);  // "F32", "BF16", ...
size_t st_dtype_size(StDType t);            // bytes per element
// The matching kvasir DType, or Unimplemented for types we only carry as raw bytes (U8, BOOL, F8).
StatusOr<DType> to_dtype(StDType t);

struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // row-major, may be empty (a scalar) or contain zeros
  size_t begin = 0;            // byte range relative to the data section
  size_t end = 0;
};

class SafetensorsFile {
 public:
  static constexpr size_t kMaxHeaderBytes = 100u << 20;
  static constexpr size_t kMaxRank = 16;

  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses bytes that the caller keeps alive as long as the returned object (fuzzers, tests).
  static StatusOr<std::unique_ptr<SafetensorsFile>> parse(std::span<const uint8_t> bytes);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }  // empty for parse()
  size_t data_offset() const { return data_offset_; }
  // Tensors sorted by data offset (the header's JSON order is not meaningful).
  const std::vector<SafetensorsTensorInfo>& tensor_infos() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;
  // The optional "__metadata__" string map, in header order.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }

  // The tensor's bytes, whatever its dtype.
  std::span<const uint8_t> raw_bytes(const SafetensorsTensorInfo& info) const;
  // NotFound when absent; Unimplemented when its dtype has no DType (see to_dtype).
  StatusOr<WeightTensor> tensor(std::string_view name) const;
  StatusOr<WeightTensor> tensor(const SafetensorsTensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  Status parse_header(std::string_view header);
  Status add_tensor(const std::string& name, const Json& desc);

  std::unique_ptr<MappedFile> mapped_;
  std::span<const uint8_t> bytes_;
  std::string path_;
  size_t data_offset_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // views into tensors_[i].name
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// Every tensor of an HF checkpoint directory, wherever its shard.
class SafetensorsShards {
 public:
  static constexpr const char* kIndexFile = "model.safetensors.index.json";
  static constexpr const char* kSingleFile = "model.safetensors";

  // `dir` holds model.safetensors.index.json (its weight_map names the shard of each tensor) or
  // a single model.safetensors.
  static StatusOr<std::unique_ptr<SafetensorsShards>> open_dir(const std::string& dir);
  // One standalone .safetensors file.
  static StatusOr<std::unique_ptr<SafetensorsShards>> open_file(const std::string& path);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> tensor_names() const;  // sorted
  // nullptr when absent; `file` (optional) receives the shard that holds it.
  const SafetensorsTensorInfo* find_tensor(std::string_view name,
                                           const SafetensorsFile** file = nullptr) const;
  StatusOr<WeightTensor> tensor(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  SafetensorsShards() = default;
  Status open_index(const std::string& index_path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, size_t> shard_of_;  // tensor name -> index into shards_
};

}  // namespace kvasir
