// GGUF metadata access: typed getters over values that GgufFile::Parser already validated. The
// reads stay bounds-checked anyway (a GgufValue is a plain struct a caller could forge), and type
// mismatches become InvalidArgument naming the key.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/quoted_text.h"
#include "loader/checked_math.h"
#include "loader/gguf_file.h"
#include "loader/gguf_internal.h"

namespace kvasir {

using gguf_detail::Cursor;
using gguf_detail::scalar_size;

namespace {

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

// An integer of any width, kept wide enough for both int64 and uint64 values.
struct WideInt {
  bool negative = false;
  uint64_t magnitude = 0;  // |value|
};

// Reads an integer of type `t` at p (caller checked bounds).
WideInt load_int(const uint8_t* p, GgufType t) {
  WideInt w;
  auto set_signed = [&](int64_t v) {
    w.negative = v < 0;
    w.magnitude = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  };
  switch (t) {
    case GgufType::kUint8:
      w.magnitude = *p;
      break;
    case GgufType::kInt8:
      set_signed(static_cast<int8_t>(*p));
      break;
    case GgufType::kUint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      w.magnitude = v;
      break;
    }
    case GgufType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      set_signed(v);
      break;
    }
    case GgufType::kUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      w.magnitude = v;
      break;
    }
    case GgufType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      set_signed(v);
      break;
    }
    case GgufType::kUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      w.magnitude = v;
      break;
    }
    case GgufType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      set_signed(v);
      break;
    }
    default:
      break;
  }
  return w;
}

bool fits_i64(const WideInt& w) {
  const uint64_t max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return w.negative ? w.magnitude <= max + 1 : w.magnitude <= max;
}

int64_t to_i64(const WideInt& w) {  // requires fits_i64(w)
  return w.negative ? static_cast<int64_t>(uint64_t{0} - w.magnitude)
                    : static_cast<int64_t>(w.magnitude);
}

double load_float(const uint8_t* p, GgufType t) {
  if (t == GgufType::kFloat32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  double d;
  std::memcpy(&d, p, 8);
  return d;
}

Status type_mismatch(std::string_view key, const GgufValue& v, std::string_view want) {
  std::string got(gguf_type_name(v.type));
  if (v.type == GgufType::kArray) got += " of " + std::string(gguf_type_name(v.elem_type));
  return invalid_argument("GGUF key '" + quoted_text(key) + "' has type " + got + ", expected " +
                          std::string(want));
}

Status forged(const char* what) {
  return internal_error(std::string("GGUF: ") + what + " lies outside the file");
}

// Reads one element header of type t at the cursor and skips its payload (already validated by
// the parser, so only bounds are rechecked).
bool next_item(Cursor& c, GgufType t, int depth, GgufValue* out) {
  out->type = t;
  out->count = 1;
  if (t == GgufType::kString) {
    uint64_t len = 0;
    if (!c.read(&len)) return false;
    out->offset = c.pos();
    out->nbytes = len;
    return c.skip(len);
  }
  if (t != GgufType::kArray) {
    out->offset = c.pos();
    out->nbytes = scalar_size(t);
    return out->nbytes != 0 && c.skip(out->nbytes);
  }
  uint32_t et = 0;
  uint64_t count = 0;
  if (depth >= GgufFile::kMaxArrayDepth || !c.read(&et) || !c.read(&count) ||
      et > static_cast<uint32_t>(GgufType::kFloat64)) {
    return false;
  }
  out->elem_type = static_cast<GgufType>(et);
  out->count = count;
  out->offset = c.pos();
  GgufValue item;
  for (uint64_t i = 0; i < count; ++i) {
    if (!next_item(c, out->elem_type, depth + 1, &item)) return false;
  }
  out->nbytes = c.pos() - out->offset;
  return true;
}

}  // namespace

StatusOr<std::string_view> GgufFile::value_string(const GgufValue& v) const {
  if (v.type != GgufType::kString) return invalid_argument("GGUF value is not a string");
  if (!checked::range_fits(v.offset, v.nbytes, bytes_.size())) return forged("string value");
  return std::string_view(reinterpret_cast<const char*>(bytes_.data() + v.offset), v.nbytes);
}

StatusOr<int64_t> GgufFile::value_int(const GgufValue& v) const {
  if (!is_integer(v.type)) return invalid_argument("GGUF value is not an integer");
  if (!checked::range_fits(v.offset, scalar_size(v.type), bytes_.size())) return forged("integer");
  WideInt w = load_int(bytes_.data() + v.offset, v.type);
  if (!fits_i64(w)) return invalid_argument("GGUF integer value does not fit in int64");
  return to_i64(w);
}

StatusOr<double> GgufFile::value_float(const GgufValue& v) const {
  if (v.type != GgufType::kFloat32 && v.type != GgufType::kFloat64) {
    return invalid_argument("GGUF value is not a float");
  }
  if (!checked::range_fits(v.offset, scalar_size(v.type), bytes_.size())) return forged("float");
  return load_float(bytes_.data() + v.offset, v.type);
}

StatusOr<std::vector<GgufValue>> GgufFile::array_items(const GgufValue& v) const {
  if (v.type != GgufType::kArray) return invalid_argument("GGUF value is not an array");
  if (!checked::range_fits(v.offset, v.nbytes, bytes_.size())) return forged("array");
  Cursor c(bytes_.first(v.offset + v.nbytes), v.offset);
  std::vector<GgufValue> items;
  items.reserve(std::min<uint64_t>(v.count, v.nbytes));  // every element takes >= 1 byte
  for (uint64_t i = 0; i < v.count; ++i) {
    GgufValue item;
    if (!next_item(c, v.elem_type, 1, &item)) return forged("array element");
    items.push_back(item);
  }
  return items;
}

namespace {

// Looks a key up or returns NotFound naming it.
StatusOr<const GgufValue*> lookup(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return not_found("GGUF key '" + quoted_text(key) + "' not found");
  return v;
}

Status out_of_type_range(std::string_view key, std::string_view want) {
  return invalid_argument("GGUF key '" + quoted_text(key) + "' value does not fit in " +
                          std::string(want));
}

}  // namespace

StatusOr<std::string_view> GgufFile::get_string(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kString) return type_mismatch(key, *v, "string");
  return value_string(*v);
}

StatusOr<uint64_t> GgufFile::get_u64(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (!is_integer(v->type)) return type_mismatch(key, *v, "an integer");
  if (!checked::range_fits(v->offset, scalar_size(v->type), bytes_.size()))
    return forged("integer");
  WideInt w = load_int(bytes_.data() + v->offset, v->type);
  if (w.negative) return out_of_type_range(key, "u64");
  return w.magnitude;
}

StatusOr<uint32_t> GgufFile::get_u32(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(uint64_t u, get_u64(key));
  if (u > std::numeric_limits<uint32_t>::max()) return out_of_type_range(key, "u32");
  return static_cast<uint32_t>(u);
}

StatusOr<int64_t> GgufFile::get_i64(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (!is_integer(v->type)) return type_mismatch(key, *v, "an integer");
  auto r = value_int(*v);
  if (!r.ok()) return out_of_type_range(key, "i64");
  return *r;
}

StatusOr<double> GgufFile::get_f64(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kFloat32 && v->type != GgufType::kFloat64) {
    return type_mismatch(key, *v, "a float");
  }
  return value_float(*v);
}

StatusOr<float> GgufFile::get_f32(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(double d, get_f64(key));
  return static_cast<float>(d);  // f64 -> f32 rounds; infinities stay infinities
}

StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kBool) return type_mismatch(key, *v, "bool");
  if (!checked::range_fits(v->offset, 1, bytes_.size())) return forged("bool");
  return bytes_[v->offset] != 0;
}

StatusOr<uint64_t> GgufFile::get_array_size(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kArray) return type_mismatch(key, *v, "an array");
  return v->count;
}

StatusOr<std::vector<std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return type_mismatch(key, *v, "array of string");
  }
  if (!checked::range_fits(v->offset, v->nbytes, bytes_.size())) return forged("array");
  Cursor c(bytes_.first(v->offset + v->nbytes), v->offset);
  std::vector<std::string_view> out;
  out.reserve(std::min<uint64_t>(v->count, v->nbytes / 8));
  for (uint64_t i = 0; i < v->count; ++i) {
    uint64_t len = 0;
    if (!c.read(&len) || len > c.remaining()) return forged("string array element");
    out.emplace_back(reinterpret_cast<const char*>(c.here()), len);
    c.skip(len);
  }
  return out;
}

StatusOr<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kArray || !is_integer(v->elem_type)) {
    return type_mismatch(key, *v, "array of integers");
  }
  const size_t es = scalar_size(v->elem_type);
  uint64_t total = 0;
  if (!checked::mul(v->count, es, &total) || total != v->nbytes ||
      !checked::range_fits(v->offset, total, bytes_.size())) {
    return forged("integer array");
  }
  std::vector<int32_t> out(v->count);
  const uint8_t* p = bytes_.data() + v->offset;
  for (uint64_t i = 0; i < v->count; ++i, p += es) {
    WideInt w = load_int(p, v->elem_type);
    if (!fits_i64(w) || to_i64(w) < std::numeric_limits<int32_t>::min() ||
        to_i64(w) > std::numeric_limits<int32_t>::max()) {
      return invalid_argument("GGUF key '" + quoted_text(key) + "' element " + std::to_string(i) +
                              " does not fit in i32");
    }
    out[i] = static_cast<int32_t>(to_i64(w));
  }
  return out;
}

StatusOr<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  KVASIR_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
  if (v->type != GgufType::kArray ||
      (v->elem_type != GgufType::kFloat32 && v->elem_type != GgufType::kFloat64)) {
    return type_mismatch(key, *v, "array of float");
  }
  const size_t es = scalar_size(v->elem_type);
  uint64_t total = 0;
  if (!checked::mul(v->count, es, &total) || total != v->nbytes ||
      !checked::range_fits(v->offset, total, bytes_.size())) {
    return forged("float array");
  }
  std::vector<float> out(v->count);
  const uint8_t* p = bytes_.data() + v->offset;
  for (uint64_t i = 0; i < v->count; ++i, p += es) {
    out[i] = static_cast<float>(load_float(p, v->elem_type));
  }
  return out;
}

std::string GgufFile::describe(const GgufValue& v) const {
  char buf[64];
  switch (v.type) {
    case GgufType::kString: {
      auto s = value_string(v);
      if (!s.ok()) return "<bad string>";
      return "\"" + quoted_text(*s, 60) + "\"";
    }
    case GgufType::kArray:
      return "[" + std::to_string(v.count) + " x " + std::string(gguf_type_name(v.elem_type)) + "]";
    case GgufType::kBool:
      if (!checked::range_fits(v.offset, 1, bytes_.size())) return "<bad bool>";
      return bytes_[v.offset] ? "true" : "false";
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      auto d = value_float(v);
      if (!d.ok()) return "<bad float>";
      std::snprintf(buf, sizeof(buf), "%.9g", *d);
      return buf;
    }
    default: {
      if (!checked::range_fits(v.offset, scalar_size(v.type), bytes_.size())) return "<bad int>";
      WideInt w = load_int(bytes_.data() + v.offset, v.type);
      return (w.negative ? "-" : "") + std::to_string(w.magnitude);
    }
  }
}

}  // namespace kvasir
