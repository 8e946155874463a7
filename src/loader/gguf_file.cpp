// GGUF parsing: header, metadata, tensor infos and data layout. Every read goes through Cursor,
// which never reads past the span; every size derived from the file goes through checked::.
// Typed metadata getters live in gguf_metadata.cpp.
#include "loader/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/quoted_text.h"
#include "loader/checked_math.h"
#include "loader/gguf_internal.h"

namespace kvasir {

static_assert(std::endian::native == std::endian::little,
              "GGUF and safetensors are little-endian; a big-endian host needs byte swaps");

namespace {

constexpr uint32_t kMaxTypeId = static_cast<uint32_t>(GgufType::kFloat64);
// Smallest possible encodings, used to reject counts that the remaining bytes cannot hold before
// looping over them (a 2^60 n_kv must fail at once, not after 2^60 iterations).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key len, 1-byte key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name len, name, n_dims, type, offset
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;             // element type, count

std::string offset_str(size_t off) { return " (at offset " + std::to_string(off) + ")"; }

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "unknown";
}

namespace gguf_detail {

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

}  // namespace gguf_detail

using gguf_detail::Cursor;
using gguf_detail::scalar_size;

std::vector<int64_t> GgufTensorInfo::shape() const {
  std::vector<int64_t> s(n_dims);
  for (uint32_t i = 0; i < n_dims; ++i) s[i] = ne[n_dims - 1 - i];
  return s;
}

// One pass over the bytes, filling a GgufFile. Errors name the field, the key or tensor, and the
// offset where the bad bytes sit.
class GgufFile::Parser {
 public:
  explicit Parser(GgufFile& f) : f_(f), cur_(f.bytes_) {}

  Status run() {
    KVASIR_RETURN_IF_ERROR(parse_header());
    KVASIR_RETURN_IF_ERROR(parse_metadata());
    KVASIR_RETURN_IF_ERROR(apply_general_keys());
    KVASIR_RETURN_IF_ERROR(parse_tensor_infos());
    return check_data_layout();
  }

 private:
  Status truncated(std::string_view what) const {
    return data_loss("GGUF: file truncated while reading " + std::string(what) +
                     offset_str(cur_.pos()) + ", file is " + std::to_string(cur_.size()) +
                     " bytes");
  }
  Status bad(std::string what, size_t at) const {
    return invalid_argument("GGUF: " + what + offset_str(at));
  }

  // `what` and `ctx` only build a message on failure: these run once per vocabulary entry.
  static std::string describe(const char* what, const std::string& ctx) {
    return ctx.empty() ? std::string(what) : std::string(what) + " of " + ctx;
  }

  template <typename T>
  Status read(T* out, const char* what, const std::string& ctx = {}) {
    return cur_.read(out) ? Status() : truncated(describe(what, ctx));
  }

  Status read_string(std::string_view* out, const char* what, const std::string& ctx,
                     uint64_t max_len) {
    const size_t at = cur_.pos();
    uint64_t len = 0;
    KVASIR_RETURN_IF_ERROR(read(&len, what, ctx));
    if (len > max_len) {
      return bad(describe(what, ctx) + " length " + std::to_string(len) + " exceeds the limit of " +
                     std::to_string(max_len),
                 at);
    }
    if (len > cur_.remaining()) {
      return data_loss("GGUF: " + describe(what, ctx) + " length " + std::to_string(len) +
                       " exceeds the " + std::to_string(cur_.remaining()) + " bytes left" +
                       offset_str(at));
    }
    *out = std::string_view(reinterpret_cast<const char*>(cur_.here()), len);
    cur_.skip(len);
    return Status();
  }

  Status parse_header() {
    if (cur_.size() < 4 + 4 + 8 + 8) {
      return data_loss("GGUF: file is " + std::to_string(cur_.size()) +
                       " bytes, shorter than the 24-byte header");
    }
    char magic[4];
    std::memcpy(magic, cur_.here(), 4);
    cur_.skip(4);
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      return invalid_argument("GGUF: bad magic (not a GGUF file)" + offset_str(0));
    }
    uint32_t version = 0;
    KVASIR_RETURN_IF_ERROR(read(&version, "version"));
    const uint32_t swapped = (version >> 24) | ((version >> 8) & 0xFF00u) |
                             ((version << 8) & 0xFF0000u) | (version << 24);
    if (version != 2 && version != 3) {
      if (swapped >= 1 && swapped <= 3) {
        return unimplemented("GGUF: big-endian files are not supported (version reads as " +
                             std::to_string(version) + ")");
      }
      if (version == 1) return unimplemented("GGUF: version 1 files are not supported");
      return unimplemented("GGUF: unsupported version " + std::to_string(version) + offset_str(4));
    }
    f_.version_ = version;
    KVASIR_RETURN_IF_ERROR(read(&n_tensors_, "tensor count"));
    KVASIR_RETURN_IF_ERROR(read(&n_kv_, "metadata count"));
    if (n_kv_ > cur_.remaining() / kMinKvBytes) {
      return data_loss("GGUF: metadata count " + std::to_string(n_kv_) + " cannot fit in the " +
                       std::to_string(cur_.remaining()) + " bytes left" + offset_str(16));
    }
    if (n_tensors_ > cur_.remaining() / kMinTensorInfoBytes) {
      return data_loss("GGUF: tensor count " + std::to_string(n_tensors_) + " cannot fit in the " +
                       std::to_string(cur_.remaining()) + " bytes left" + offset_str(8));
    }
    return Status();
  }

  Status parse_metadata() {
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const size_t at = cur_.pos();
      GgufKv kv;
      KVASIR_RETURN_IF_ERROR(
          read_string(&kv.key, "key", "metadata entry " + std::to_string(i), kMaxKeyBytes));
      if (kv.key.empty())
        return bad("metadata entry " + std::to_string(i) + " has an empty key", at);
      const std::string ctx = "metadata '" + quoted_text(kv.key) + "'";
      uint32_t type = 0;
      const size_t type_at = cur_.pos();
      KVASIR_RETURN_IF_ERROR(read(&type, "type", ctx));
      if (type > kMaxTypeId) {
        return bad(ctx + " has unknown value type " + std::to_string(type), type_at);
      }
      KVASIR_RETURN_IF_ERROR(parse_value(static_cast<GgufType>(type), 0, ctx, &kv.value));
      if (!f_.kv_index_.emplace(kv.key, f_.kvs_.size()).second) {
        return bad("duplicate metadata key '" + quoted_text(kv.key) + "'", at);
      }
      f_.kvs_.push_back(kv);
    }
    return Status();
  }

  // Validates one value of `type` at the cursor and records where it lies.
  Status parse_value(GgufType type, int depth, const std::string& ctx, GgufValue* out) {
    const size_t at = cur_.pos();
    out->type = type;
    out->count = 1;
    if (type == GgufType::kString) {
      std::string_view s;
      KVASIR_RETURN_IF_ERROR(
          read_string(&s, "string value", ctx, std::numeric_limits<uint64_t>::max()));
      out->offset = cur_.pos() - s.size();
      out->nbytes = s.size();
      return Status();
    }
    if (type != GgufType::kArray) {
      const size_t n = scalar_size(type);
      if (cur_.remaining() < n) return truncated(describe("value", ctx));
      if (type == GgufType::kBool && *cur_.here() > 1) {
        return bad(ctx + " has bool byte " + std::to_string(*cur_.here()) + " (must be 0 or 1)",
                   at);
      }
      out->offset = at;
      out->nbytes = n;
      cur_.skip(n);
      return Status();
    }
    uint32_t elem = 0;
    uint64_t count = 0;
    KVASIR_RETURN_IF_ERROR(read(&elem, "array element type", ctx));
    if (elem > kMaxTypeId) {
      return bad(ctx + " is an array of unknown type " + std::to_string(elem), at);
    }
    KVASIR_RETURN_IF_ERROR(read(&count, "array length", ctx));
    const auto et = static_cast<GgufType>(elem);
    if (et == GgufType::kArray && depth + 1 >= kMaxArrayDepth) {
      return bad(ctx + " nests arrays deeper than " + std::to_string(kMaxArrayDepth), at);
    }
    const uint64_t min_elem = et == GgufType::kString  ? 8
                              : et == GgufType::kArray ? kMinNestedArrayBytes
                                                       : scalar_size(et);
    if (count > cur_.remaining() / min_elem) {
      return data_loss("GGUF: " + ctx + " claims " + std::to_string(count) + " elements of type " +
                       std::string(gguf_type_name(et)) + " but only " +
                       std::to_string(cur_.remaining()) + " bytes are left" + offset_str(at));
    }
    out->elem_type = et;
    out->count = count;
    out->offset = cur_.pos();
    if (et == GgufType::kString || et == GgufType::kArray) {
      GgufValue item;
      for (uint64_t i = 0; i < count; ++i) {
        KVASIR_RETURN_IF_ERROR(parse_value(et, depth + 1, ctx, &item));
      }
    } else {
      if (et == GgufType::kBool) {
        for (uint64_t i = 0; i < count; ++i) {
          if (cur_.here()[i] > 1) return bad(ctx + " has a bool element that is not 0 or 1", at);
        }
      }
      cur_.skip(count * min_elem);  // cannot overflow: count <= remaining / min_elem
    }
    out->nbytes = cur_.pos() - out->offset;
    return Status();
  }

  Status apply_general_keys() {
    if (const GgufValue* v = f_.find("general.alignment")) {
      if (v->type != GgufType::kUint32) {
        return bad("general.alignment must be u32, got " + std::string(gguf_type_name(v->type)),
                   v->offset);
      }
      uint32_t a = 0;
      std::memcpy(&a, f_.bytes_.data() + v->offset, 4);
      if (!checked::is_pow2(a)) {
        return bad("general.alignment " + std::to_string(a) + " is not a power of two", v->offset);
      }
      f_.alignment_ = a;
    }
    if (const GgufValue* v = f_.find("general.architecture")) {
      if (v->type != GgufType::kString) {
        return bad("general.architecture must be a string", v->offset);
      }
      f_.architecture_ =
          std::string_view(reinterpret_cast<const char*>(f_.bytes_.data() + v->offset), v->nbytes);
    }
    return Status();
  }

  Status parse_tensor_infos() {
    if (n_tensors_ > cur_.remaining() / kMinTensorInfoBytes) {
      return data_loss("GGUF: tensor count " + std::to_string(n_tensors_) + " cannot fit in the " +
                       std::to_string(cur_.remaining()) + " bytes left after the metadata" +
                       offset_str(cur_.pos()));
    }
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      const size_t at = cur_.pos();
      GgufTensorInfo t;
      const std::string idx = "tensor #" + std::to_string(i);
      KVASIR_RETURN_IF_ERROR(read_string(&t.name, "name", idx, kMaxTensorNameBytes));
      if (t.name.empty()) return bad(idx + " has an empty name", at);
      const std::string ctx = "tensor '" + quoted_text(t.name) + "'";
      KVASIR_RETURN_IF_ERROR(read(&t.n_dims, "n_dims", ctx));
      if (t.n_dims > 4) {
        return bad(ctx + " has n_dims " + std::to_string(t.n_dims) + " (at most 4)", at);
      }
      uint64_t num_elements = 1;
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        uint64_t dim = 0;
        const size_t dim_at = cur_.pos();
        KVASIR_RETURN_IF_ERROR(read(&dim, "dimensions", ctx));
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            !checked::mul(num_elements, dim, &num_elements) ||
            num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return bad(ctx + " dimension " + std::to_string(d) + " = " + std::to_string(dim) +
                         " overflows the element count",
                     dim_at);
        }
        t.ne[d] = static_cast<int64_t>(dim);
      }
      uint32_t type = 0;
      const size_t type_at = cur_.pos();
      KVASIR_RETURN_IF_ERROR(read(&type, "type", ctx));
      const auto info = type < kFirstNonGgmlType ? dtype_info(type) : std::nullopt;
      if (!info) {
        // The one unsupported type real checkpoints ship (gpt-oss's experts) is named.
        constexpr uint32_t kGgmlTypeMxfp4 = 39;
        return unimplemented("GGUF: " + ctx + " has unsupported ggml type " + std::to_string(type) +
                             (type == kGgmlTypeMxfp4 ? " (MXFP4)" : "") + offset_str(type_at));
      }
      t.dtype = static_cast<DType>(type);
      if (t.ne[0] % info->block_size != 0) {
        return bad(ctx + " row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                       std::string(info->name) + " block size " + std::to_string(info->block_size),
                   at);
      }
      // nbytes = (ne0 / block) * type_size * ne1 * ne2 * ne3, each step overflow-checked.
      uint64_t nbytes = static_cast<uint64_t>(t.ne[0]) / info->block_size;
      bool ok = checked::mul(nbytes, info->type_size, &nbytes);
      for (int d = 1; d < 4 && ok; ++d)
        ok = checked::mul(nbytes, static_cast<uint64_t>(t.ne[d]), &nbytes);
      if (!ok || nbytes > cur_.size()) {
        return data_loss("GGUF: " + ctx + " (" + std::to_string(num_elements) + " x " +
                         std::string(info->name) + ") needs " +
                         (ok ? std::to_string(nbytes) : std::string("over 2^64")) +
                         " bytes, more than the whole file" + offset_str(at));
      }
      t.nbytes = nbytes;
      KVASIR_RETURN_IF_ERROR(read(&t.offset, "data offset", ctx));
      if (!f_.tensor_index_.emplace(t.name, f_.tensors_.size()).second) {
        return bad("duplicate tensor name '" + quoted_text(t.name) + "'", at);
      }
      f_.tensors_.push_back(t);
    }
    return Status();
  }

  Status check_data_layout() {
    uint64_t data = 0;
    if (!checked::align_up(cur_.pos(), f_.alignment_, &data)) {
      return bad("data section offset overflows", cur_.pos());
    }
    f_.data_offset_ = data;
    if (f_.tensors_.empty()) return Status();  // vocab-only files may end right after metadata
    if (data > cur_.size()) {
      return data_loss("GGUF: data section starts at " + std::to_string(data) +
                       " but the file is only " + std::to_string(cur_.size()) + " bytes");
    }
    const uint64_t data_bytes = cur_.size() - data;
    for (const GgufTensorInfo& t : f_.tensors_) {
      const std::string ctx = "tensor '" + quoted_text(t.name) + "'";
      if (t.offset % f_.alignment_ != 0) {
        return invalid_argument("GGUF: " + ctx + " data offset " + std::to_string(t.offset) +
                                " is not a multiple of the alignment " +
                                std::to_string(f_.alignment_));
      }
      if (!checked::range_fits(t.offset, t.nbytes, data_bytes)) {
        return data_loss("GGUF: " + ctx + " data [" + std::to_string(t.offset) + ", +" +
                         std::to_string(t.nbytes) + ") lies outside the " +
                         std::to_string(data_bytes) + "-byte data section");
      }
    }
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& prev = f_.tensors_[order[i - 1]];
      const GgufTensorInfo& cur = f_.tensors_[order[i]];
      if (cur.offset < prev.offset + prev.nbytes) {  // no overflow: both ranges fit in the file
        return invalid_argument("GGUF: tensor '" + quoted_text(cur.name) + "' overlaps tensor '" +
                                quoted_text(prev.name) + "'");
      }
    }
    return Status();
  }

  GgufFile& f_;
  Cursor cur_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  Parser parser(*f);
  KVASIR_RETURN_IF_ERROR(parser.run());
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::open(path));
  auto parsed = parse(std::span<const uint8_t>(mapped->data(), mapped->size()));
  if (!parsed.ok()) {
    return Status(parsed.status().code(), path + ": " + parsed.status().message());
  }
  std::unique_ptr<GgufFile> f = std::move(parsed).value();
  f->mapped_ = std::move(mapped);
  f->path_ = path;
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<WeightTensor> GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) return not_found("GGUF: no tensor named '" + quoted_text(name) + "'");
  return tensor(*info);
}

WeightTensor GgufFile::tensor(const GgufTensorInfo& info) const {
  WeightTensor t;
  t.name = std::string(info.name);
  t.dtype = info.dtype;
  t.shape = info.shape();
  t.data = bytes_.data() + data_offset_ + info.offset;
  t.nbytes = info.nbytes;
  return t;
}

}  // namespace kvasir
