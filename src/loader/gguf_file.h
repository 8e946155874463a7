// GgufFile: a validating reader of GGUF v2/v3 files (llama.cpp's weight format) over a read-only
// mmap. parse() checks every length, count, offset and dimension before use, so any byte string
// yields either a usable file or a Status naming the problem and its offset; values and tensor
// data are then read in place (string_views and pointers into the mapping, never copies of data).
// Must not interpret metadata (that is config/ and tokenizer/) or convert tensor data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mapped_file.h"
#include "common/status.h"
#include "core/dtype.h"
#include "loader/weight_tensor.h"

namespace kvasir {

// GGUF metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view gguf_type_name(GgufType t);

// A view of one validated metadata value inside the file's bytes.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  uint64_t count = 1;                     // arrays: number of elements; scalars and strings: 1
  size_t offset = 0;  // file offset of the payload: string bytes (after the length) for a
                      // string, the first element for an array, the value for a scalar
  size_t nbytes = 0;  // payload size in the file
};

struct GgufKv {
  std::string_view key;  // points into the file's bytes
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;  // points into the file's bytes
  DType dtype = DType::kF32;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGUF order: ne[0] is the contiguous dimension
  uint64_t offset = 0;                    // relative to data_offset()
  size_t nbytes = 0;

  // Row-major shape: ne reversed, so shape().back() == ne[0].
  std::vector<int64_t> shape() const;
};

class GgufFile {
 public:
  // Limits on what we accept; real files are far below them.
  static constexpr int kMaxArrayDepth = 8;  // arrays of arrays of ...
  static constexpr size_t kMaxKeyBytes = 64 * 1024;
  static constexpr size_t kMaxTensorNameBytes = 4096;

  // Maps the file and parses it; the mapping lives as long as the returned object.
  static StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes the caller keeps alive for the lifetime of the returned object (fuzzers, tests).
  static StatusOr<std::unique_ptr<GgufFile>> parse(std::span<const uint8_t> bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::string& path() const { return path_; }  // empty for parse()
  // general.architecture, or "" when absent.
  std::string_view architecture() const { return architecture_; }

  // ---- metadata, in file order ----
  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: NotFound when the key is absent, InvalidArgument on a type mismatch or a value
  // that does not fit. Integer getters accept any integer type whose value fits; get_f32/get_f64
  // accept float32 and float64.
  StatusOr<std::string_view> get_string(std::string_view key) const;
  StatusOr<uint32_t> get_u32(std::string_view key) const;
  StatusOr<uint64_t> get_u64(std::string_view key) const;
  StatusOr<int64_t> get_i64(std::string_view key) const;
  StatusOr<float> get_f32(std::string_view key) const;
  StatusOr<double> get_f64(std::string_view key) const;
  StatusOr<bool> get_bool(std::string_view key) const;
  // Arrays. String views point into the mapping (a 262k-token vocabulary costs one vector of
  // views); numbers are copied out because the mapping gives no alignment guarantee.
  StatusOr<uint64_t> get_array_size(std::string_view key) const;
  StatusOr<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  StatusOr<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  StatusOr<std::vector<float>> get_f32_array(std::string_view key) const;

  // Value-level access for generic walkers (dump tools, nested arrays). `v` must come from this
  // file; the reads are still bounds-checked.
  StatusOr<std::string_view> value_string(const GgufValue& v) const;
  StatusOr<int64_t> value_int(const GgufValue& v) const;   // any integer type; u64 must fit
  StatusOr<double> value_float(const GgufValue& v) const;  // float32/float64
  StatusOr<std::vector<GgufValue>> array_items(const GgufValue& v) const;
  // Short printable form ("[49152 x string]", "\"llama\"", "1e-05") for logs and tools.
  std::string describe(const GgufValue& v) const;

  // ---- tensors, in file order ----
  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // NotFound when absent.
  StatusOr<WeightTensor> tensor(std::string_view name) const;
  WeightTensor tensor(const GgufTensorInfo& info) const;

 private:
  class Parser;
  GgufFile() = default;

  std::unique_ptr<MappedFile> mapped_;  // null for parse()
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::string_view architecture_;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace kvasir
