#include "loader/safetensors_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include "common/json.h"
#include "common/quoted_text.h"
#include "loader/checked_math.h"

namespace kvasir {

namespace {

struct StDTypeEntry {
  std::string_view name;
  StDType type;
  size_t size;
};

constexpr StDTypeEntry kStDTypes[] = {
    {"F64", StDType::kF64, 8},   {"F32", StDType::kF32, 4},        {"F16", StDType::kF16, 2},
    {"BF16", StDType::kBF16, 2}, {"I64", StDType::kI64, 8},        {"I32", StDType::kI32, 4},
    {"I16", StDType::kI16, 2},   {"I8", StDType::kI8, 1},          {"U64", StDType::kU64, 8},
    {"U32", StDType::kU32, 4},   {"U16", StDType::kU16, 2},        {"U8", StDType::kU8, 1},
    {"BOOL", StDType::kBool, 1}, {"F8_E4M3", StDType::kF8E4M3, 1}, {"F8_E5M2", StDType::kF8E5M2, 1},
};

const StDTypeEntry* find_st_dtype(std::string_view name) {
  for (const auto& e : kStDTypes) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const StDTypeEntry& st_entry(StDType t) {
  for (const auto& e : kStDTypes) {
    if (e.type == t) return e;
  }
  return kStDTypes[1];  // unreachable: every enumerator has an entry
}

// A non-negative JSON integer, or nullopt (doubles such as 1e3 are refused: headers are ints).
std::optional<uint64_t> json_uint(const Json& j) {
  if (!j.is_int() || j.as_int() < 0) return std::nullopt;
  return static_cast<uint64_t>(j.as_int());
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string_view st_dtype_name(StDType t) { return st_entry(t).name; }
size_t st_dtype_size(StDType t) { return st_entry(t).size; }

StatusOr<DType> to_dtype(StDType t) {
  switch (t) {
    case StDType::kF64:
      return DType::kF64;
    case StDType::kF32:
      return DType::kF32;
    case StDType::kF16:
      return DType::kF16;
    case StDType::kBF16:
      return DType::kBF16;
    case StDType::kI64:
      return DType::kI64;
    case StDType::kI32:
      return DType::kI32;
    case StDType::kI16:
      return DType::kI16;
    case StDType::kI8:
      return DType::kI8;
    case StDType::kF8E4M3:
      return DType::kF8E4M3;
    case StDType::kF8E5M2:
      return DType::kF8E5M2;
    default:
      break;
  }
  return unimplemented("safetensors dtype " + std::string(st_dtype_name(t)) +
                       " has no kvasir DType (readable only as raw bytes)");
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) {
    return data_loss("safetensors: file is " + std::to_string(bytes.size()) +
                     " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes) {
    return out_of_range("safetensors: header length " + std::to_string(header_len) +
                        " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > bytes.size() - 8) {
    return data_loss("safetensors: header length " + std::to_string(header_len) + " exceeds the " +
                     std::to_string(bytes.size() - 8) + " bytes after it");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->bytes_ = bytes;
  f->data_offset_ = 8 + header_len;
  KVASIR_RETURN_IF_ERROR(f->parse_header(
      std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), header_len)));
  return f;
}

Status SafetensorsFile::parse_header(std::string_view header) {
  JsonParseLimits limits;
  limits.max_depth = 8;  // {name: {shape: [..]}} needs 3; __metadata__ 2
  auto parsed = parse_json(header, limits);
  if (!parsed.ok()) {
    return invalid_argument("safetensors: header is not valid JSON: " + parsed.status().message());
  }
  const Json& root = *parsed;
  if (!root.is_object()) return invalid_argument("safetensors: header is not a JSON object");
  std::unordered_set<std::string_view> seen;
  bool seen_metadata = false;
  for (const auto& [name, desc] : root.as_object()) {
    if (name == "__metadata__") {
      if (seen_metadata) return invalid_argument("safetensors: duplicate __metadata__");
      seen_metadata = true;
      if (!desc.is_object()) return invalid_argument("safetensors: __metadata__ is not an object");
      for (const auto& [k, v] : desc.as_object()) {
        if (!v.is_string()) {
          return invalid_argument("safetensors: __metadata__ value of '" + quoted_text(k) + "' is not a string");
        }
        metadata_.emplace_back(k, v.as_string());
      }
      continue;
    }
    if (!seen.insert(name).second) {
      return invalid_argument("safetensors: duplicate tensor name '" + quoted_text(name) + "'");
    }
    KVASIR_RETURN_IF_ERROR(add_tensor(name, desc));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    if (tensors_[i].begin < tensors_[i - 1].end) {
      return invalid_argument("safetensors: tensor '" + quoted_text(tensors_[i].name) +
                              "' overlaps tensor '" + quoted_text(tensors_[i - 1].name) + "'");
    }
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return Status();
}

Status SafetensorsFile::add_tensor(const std::string& name, const Json& desc) {
  const std::string ctx = "safetensors: tensor '" + quoted_text(name) + "'";
  if (name.empty()) return invalid_argument("safetensors: a tensor has an empty name");
  if (!desc.is_object()) return invalid_argument(ctx + " is not described by a JSON object");
  SafetensorsTensorInfo t;
  t.name = name;

  const Json* dtype = desc.find("dtype");
  if (dtype == nullptr || !dtype->is_string())
    return invalid_argument(ctx + " has no dtype string");
  const StDTypeEntry* entry = find_st_dtype(dtype->as_string());
  if (entry == nullptr) {
    return unimplemented(ctx + " has unknown dtype '" + quoted_text(dtype->as_string(), 32) + "'");
  }
  t.dtype = entry->type;

  const Json* shape = desc.find("shape");
  if (shape == nullptr || !shape->is_array()) return invalid_argument(ctx + " has no shape array");
  if (shape->size() > kMaxRank) {
    return invalid_argument(ctx + " has rank " + std::to_string(shape->size()) + " (at most " +
                            std::to_string(kMaxRank) + ")");
  }
  uint64_t num_elements = 1;
  for (const Json& d : shape->as_array()) {
    auto dim = json_uint(d);
    if (!dim)
      return invalid_argument(ctx + " has a shape entry that is not a non-negative integer");
    if (!checked::mul(num_elements, *dim, &num_elements) ||
        num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument(ctx + " shape overflows the element count");
    }
    t.shape.push_back(static_cast<int64_t>(*dim));
  }

  const Json* offsets = desc.find("data_offsets");
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2) {
    return invalid_argument(ctx + " has no data_offsets [begin, end]");
  }
  auto begin = json_uint(offsets->as_array()[0]);
  auto end = json_uint(offsets->as_array()[1]);
  if (!begin || !end) return invalid_argument(ctx + " data_offsets are not non-negative integers");
  const uint64_t data_bytes = bytes_.size() - data_offset_;
  if (*begin > *end || *end > data_bytes) {
    return data_loss(ctx + " data_offsets [" + std::to_string(*begin) + ", " +
                     std::to_string(*end) + ") lie outside the " + std::to_string(data_bytes) +
                     "-byte data section");
  }
  uint64_t nbytes = 0;
  if (!checked::mul(num_elements, entry->size, &nbytes) || nbytes != *end - *begin) {
    return invalid_argument(ctx + " shape " + shape_str(t.shape) + " of " +
                            std::string(entry->name) + " does not match its " +
                            std::to_string(*end - *begin) + "-byte data_offsets span");
  }
  t.begin = *begin;
  t.end = *end;
  tensors_.push_back(std::move(t));
  return Status();
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::open(path));
  auto parsed = parse(std::span<const uint8_t>(mapped->data(), mapped->size()));
  if (!parsed.ok()) {
    return Status(parsed.status().code(), path + ": " + parsed.status().message());
  }
  std::unique_ptr<SafetensorsFile> f = std::move(parsed).value();
  f->mapped_ = std::move(mapped);
  f->path_ = path;
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::raw_bytes(const SafetensorsTensorInfo& info) const {
  return bytes_.subspan(data_offset_ + info.begin, info.end - info.begin);
}

StatusOr<WeightTensor> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensorInfo* info = find_tensor(name);
  if (info == nullptr) return not_found("safetensors: no tensor named '" + quoted_text(name) + "'");
  return tensor(*info);
}

StatusOr<WeightTensor> SafetensorsFile::tensor(const SafetensorsTensorInfo& info) const {
  auto dtype = to_dtype(info.dtype);
  if (!dtype.ok()) {
    return Status(dtype.status().code(), "tensor '" + quoted_text(info.name) + "': " + dtype.status().message());
  }
  WeightTensor t;
  t.name = info.name;
  t.dtype = *dtype;
  t.shape = info.shape;
  auto raw = raw_bytes(info);
  t.data = raw.data();
  t.nbytes = raw.size();
  return t;
}

// ---- SafetensorsShards ----

StatusOr<std::unique_ptr<SafetensorsShards>> SafetensorsShards::open_file(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  std::unique_ptr<SafetensorsShards> s(new SafetensorsShards());
  const size_t slash = path.rfind('/');
  s->dir_ = slash == std::string::npos ? "." : path.substr(0, slash);
  for (const auto& t : file->tensor_infos()) s->shard_of_.emplace(t.name, 0);
  s->shards_.push_back(std::move(file));
  return s;
}

StatusOr<std::unique_ptr<SafetensorsShards>> SafetensorsShards::open_dir(const std::string& dir) {
  const std::string index_path = dir + "/" + kIndexFile;
  const std::string single_path = dir + "/" + kSingleFile;
  if (is_regular_file(index_path)) {
    std::unique_ptr<SafetensorsShards> s(new SafetensorsShards());
    s->dir_ = dir;
    KVASIR_RETURN_IF_ERROR(s->open_index(index_path));
    return s;
  }
  if (is_regular_file(single_path)) return open_file(single_path);
  return not_found("no " + std::string(kIndexFile) + " or " + kSingleFile + " in " + dir);
}

Status SafetensorsShards::open_index(const std::string& index_path) {
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path, 64u << 20));
  auto parsed = parse_json(text);
  if (!parsed.ok()) {
    return invalid_argument(index_path + ": not valid JSON: " + parsed.status().message());
  }
  const Json* weight_map = parsed->find("weight_map");
  if (weight_map == nullptr || !weight_map->is_object()) {
    return invalid_argument(index_path + ": no weight_map object");
  }
  std::unordered_map<std::string, size_t> shard_index;  // file name -> index into shards_
  for (const auto& [name, shard] : weight_map->as_object()) {
    if (!shard.is_string()) {
      return invalid_argument(index_path + ": weight_map entry '" + quoted_text(name) + "' is not a string");
    }
    const std::string& file = shard.as_string();
    // Shards must sit beside the index: a path could point anywhere on disk.
    if (file.empty() || file == "." || file == ".." ||
        file.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos) {
      return invalid_argument(index_path + ": weight_map entry '" + quoted_text(name) +
                              "' names an invalid shard file '" + quoted_text(file) + "'");
    }
    auto it = shard_index.find(file);
    if (it == shard_index.end()) {
      KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                              SafetensorsFile::open(dir_ + "/" + file));
      it = shard_index.emplace(file, shards_.size()).first;
      shards_.push_back(std::move(f));
    }
    if (shards_[it->second]->find_tensor(name) == nullptr) {
      return data_loss(index_path + ": weight_map puts '" + quoted_text(name) + "' in " + quoted_text(file) +
                       ", which has no such tensor");
    }
    if (!shard_of_.emplace(name, it->second).second) {
      return invalid_argument(index_path + ": weight_map lists '" + quoted_text(name) + "' twice");
    }
  }
  return Status();
}

std::vector<std::string> SafetensorsShards::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(shard_of_.size());
  for (const auto& [name, idx] : shard_of_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

const SafetensorsTensorInfo* SafetensorsShards::find_tensor(std::string_view name,
                                                            const SafetensorsFile** file) const {
  auto it = shard_of_.find(std::string(name));
  if (it == shard_of_.end()) return nullptr;
  if (file != nullptr) *file = shards_[it->second].get();
  return shards_[it->second]->find_tensor(name);
}

StatusOr<WeightTensor> SafetensorsShards::tensor(std::string_view name) const {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = find_tensor(name, &file);
  if (info == nullptr) return not_found("safetensors: no tensor named '" + quoted_text(name) + "'");
  return file->tensor(*info);
}

}  // namespace kvasir
