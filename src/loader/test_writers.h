// Test-only writers of small GGUF and safetensors files, so parser tests can build valid inputs
// and then corrupt chosen fields. GgufWriter records the offset of every field it writes
// (field("n_kv"), field("kv:<key>:len"), field("tensor:<name>:dim0"), ...).
// Must not be used outside tests: it trusts its inputs and throws on misuse.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "loader/gguf_file.h"

namespace kvasir::testing {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put(Bytes& b, T v) {
  // resize + memcpy, not insert of a range: GCC 12 at -O2 warns (falsely) of an overflow when
  // that insert is inlined into an empty vector.
  const size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

template <typename T>
void patch(Bytes& b, size_t at, T v) {
  if (at + sizeof(T) > b.size()) throw std::out_of_range("patch past end");
  std::memcpy(b.data() + at, &v, sizeof(T));
}

inline void put_str(Bytes& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Scalars: `payload` is the encoded value (use the typed helpers below).
  void add_raw(const std::string& key, GgufType type, Bytes payload) {
    kvs_.push_back({key, type, std::move(payload)});
  }
  template <typename T>
  void add_scalar(const std::string& key, GgufType type, T v) {
    Bytes p;
    put(p, v);
    add_raw(key, type, std::move(p));
  }
  void add_u32(const std::string& k, uint32_t v) { add_scalar(k, GgufType::kUint32, v); }
  void add_f32(const std::string& k, float v) { add_scalar(k, GgufType::kFloat32, v); }
  void add_bool(const std::string& k, bool v) { add_scalar<uint8_t>(k, GgufType::kBool, v); }
  void add_string(const std::string& k, const std::string& v) {
    Bytes p;
    put_str(p, v);
    add_raw(k, GgufType::kString, std::move(p));
  }
  // Encoded array payload: element type, count, elements.
  static Bytes string_array(const std::vector<std::string>& v) {
    Bytes p;
    put<uint32_t>(p, static_cast<uint32_t>(GgufType::kString));
    put<uint64_t>(p, v.size());
    for (const auto& s : v) put_str(p, s);
    return p;
  }
  template <typename T>
  static Bytes scalar_array(GgufType et, const std::vector<T>& v) {
    Bytes p;
    put<uint32_t>(p, static_cast<uint32_t>(et));
    put<uint64_t>(p, v.size());
    for (T x : v) put(p, x);
    return p;
  }
  static Bytes array_of_arrays(const std::vector<Bytes>& inner) {
    Bytes p;
    put<uint32_t>(p, static_cast<uint32_t>(GgufType::kArray));
    put<uint64_t>(p, inner.size());
    for (const auto& a : inner) p.insert(p.end(), a.begin(), a.end());
    return p;
  }
  void add_array(const std::string& k, Bytes encoded) {
    add_raw(k, GgufType::kArray, std::move(encoded));
  }

  // `ne` in GGUF order (ne[0] contiguous); `data` must be exactly the tensor's byte size.
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, Bytes data) {
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
  }
  void set_alignment(uint32_t a) { alignment_ = a; }

  Bytes build() {
    fields_.clear();
    Bytes b;
    for (char c : {'G', 'G', 'U', 'F'}) b.push_back(static_cast<uint8_t>(c));
    fields_["version"] = b.size();
    put<uint32_t>(b, version_);
    fields_["n_tensors"] = b.size();
    put<uint64_t>(b, tensors_.size());
    fields_["n_kv"] = b.size();
    put<uint64_t>(b, kvs_.size());
    for (const auto& kv : kvs_) {
      fields_["kv:" + kv.key + ":len"] = b.size();
      put_str(b, kv.key);
      fields_["kv:" + kv.key + ":type"] = b.size();
      put<uint32_t>(b, static_cast<uint32_t>(kv.type));
      fields_["kv:" + kv.key + ":value"] = b.size();
      b.insert(b.end(), kv.payload.begin(), kv.payload.end());
    }
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(off);
      off += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      const std::string p = "tensor:" + t.name + ":";
      fields_[p + "name"] = b.size();
      put_str(b, t.name);
      fields_[p + "n_dims"] = b.size();
      put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
      for (size_t d = 0; d < t.ne.size(); ++d) {
        fields_[p + "dim" + std::to_string(d)] = b.size();
        put<uint64_t>(b, static_cast<uint64_t>(t.ne[d]));
      }
      fields_[p + "type"] = b.size();
      put<uint32_t>(b, static_cast<uint32_t>(t.type));
      fields_[p + "offset"] = b.size();
      put<uint64_t>(b, offsets[i]);
    }
    while (b.size() % alignment_ != 0) b.push_back(0);
    fields_["data"] = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      b.insert(b.end(), t.data.begin(), t.data.end());
      if (i + 1 < tensors_.size()) {  // no padding after the last tensor: every prefix is short
        while ((b.size() - fields_["data"]) % alignment_ != 0) b.push_back(0);
      }
    }
    return b;
  }

  size_t field(const std::string& name) const {
    auto it = fields_.find(name);
    if (it == fields_.end()) throw std::out_of_range("no field " + name);
    return it->second;
  }

 private:
  struct Kv {
    std::string key;
    GgufType type;
    Bytes payload;
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    Bytes data;
  };
  uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> fields_;
};

// A safetensors file from a header JSON text and a data section, both verbatim.
inline Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  Bytes b;
  put<uint64_t>(b, header.size());
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  Bytes data;
};

// Builds a well-formed file, tensors packed in order; the header is padded to 8 bytes as the
// reference writer does.
inline Bytes safetensors_bytes(const std::vector<StTensor>& tensors,
                               const std::string& metadata_json = "") {
  std::string h = "{";
  Bytes data;
  if (!metadata_json.empty()) h += "\"__metadata__\":" + metadata_json;
  for (const auto& t : tensors) {
    if (h.size() > 1) h += ",";
    h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
         std::to_string(data.size() + t.data.size()) + "]}";
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  return safetensors_bytes(h, data);
}

inline Bytes iota_bytes(size_t n, uint8_t start = 1) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

}  // namespace kvasir::testing
