#include "structured/json_schema_shape.h"

#include <cmath>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kvasir::structured {
namespace {

uint8_t type_bits(std::string_view name) {
  if (name == "null") return kTypeNull;
  if (name == "boolean") return kTypeBoolean;
  if (name == "integer") return kTypeInteger;
  if (name == "number") return kTypeInteger | kTypeFraction;
  if (name == "string") return kTypeString;
  if (name == "array") return kTypeArray;
  if (name == "object") return kTypeObject;
  return 0;
}

std::string percent_decode(std::string_view s) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string unescape_token(std::string t) {
  for (auto [from, to] : {std::pair{"~1", "/"}, std::pair{"~0", "~"}}) {
    for (size_t p = 0; (p = t.find(from, p)) != std::string::npos; ++p) t.replace(p, 2, to);
  }
  return t;
}

// A schema after following $ref hops (at most 32; nullptr on a cycle or a dangling ref).
const Json* deref(const Json& root, const Json* s) {
  for (int hop = 0; hop < 32 && s != nullptr; ++hop) {
    const Json* ref = s->is_object() ? s->find("$ref") : nullptr;
    if (ref == nullptr || !ref->is_string()) return s;
    std::string ignored;
    s = resolve_ref(root, ref->as_string(), &ignored);
  }
  return nullptr;
}

// What a oneOf branch may be: a finite set of values, or any value of some types; for objects,
// the required properties pinned to finite sets (discriminators).
struct Shape {
  bool finite = false;
  std::vector<const Json*> values;
  uint8_t types = 0xFF;
  std::vector<std::pair<std::string, std::vector<const Json*>>> discriminators;
};

bool finite_values(const Json& s, std::vector<const Json*>* out) {
  if (const Json* c = s.find("const")) {
    out->assign(1, c);
    return true;
  }
  if (const Json* e = s.find("enum"); e != nullptr && e->is_array()) {
    out->clear();
    for (const Json& v : e->as_array()) out->push_back(&v);
    return true;
  }
  return false;
}

Shape shape_of(const Json& root, const Json& branch) {
  Shape shape;
  const Json* s = deref(root, &branch);
  if (s == nullptr) return shape;
  if (s->is_bool()) {
    if (!s->as_bool()) shape.types = 0;
    return shape;
  }
  if (!s->is_object()) return shape;
  if (s->contains("$ref")) return shape;
  if (finite_values(*s, &shape.values)) {
    shape.finite = true;
    shape.types = 0;
    for (const Json* v : shape.values) shape.types |= value_type(*v);
    return shape;
  }
  if (s->contains("anyOf") || s->contains("oneOf") || s->contains("allOf")) return shape;
  if (const Json* t = s->find("type")) {
    uint8_t m = type_mask(*t);
    if (m != 0) shape.types = m;
  } else if (s->contains("properties") || s->contains("additionalProperties") || s->contains("unevaluatedProperties")) {
    shape.types = kTypeObject;
  } else if (s->contains("items") || s->contains("prefixItems") || s->contains("unevaluatedItems")) {
    shape.types = kTypeArray;
  }
  const Json* required = s->find("required");
  const Json* props = s->find("properties");
  if (shape.types == kTypeObject && required != nullptr && required->is_array() && props != nullptr &&
      props->is_object()) {
    for (const Json& name : required->as_array()) {
      if (!name.is_string()) continue;
      const Json* p = props->find(name.as_string());
      const Json* target = p == nullptr ? nullptr : deref(root, p);
      std::vector<const Json*> values;
      if (target != nullptr && target->is_object() && finite_values(*target, &values)) {
        shape.discriminators.emplace_back(name.as_string(), std::move(values));
      }
    }
  }
  return shape;
}

bool values_disjoint(const std::vector<const Json*>& a, const std::vector<const Json*>& b) {
  for (const Json* x : a) {
    for (const Json* y : b) {
      if (json_equal(*x, *y)) return false;
    }
  }
  return true;
}

bool disjoint(const Shape& a, const Shape& b) {
  if ((a.types & b.types) == 0) return true;
  if (a.finite && b.finite) return values_disjoint(a.values, b.values);
  if (a.finite || b.finite) return false;
  if (a.types != kTypeObject || b.types != kTypeObject) return false;
  for (const auto& [name, values] : a.discriminators) {
    for (const auto& [other_name, other_values] : b.discriminators) {
      if (name == other_name && values_disjoint(values, other_values)) return true;
    }
  }
  return false;
}

}  // namespace

uint8_t type_mask(const Json& type) {
  if (type.is_string()) return type_bits(type.as_string());
  if (!type.is_array() || type.size() == 0) return 0;
  uint8_t mask = 0;
  for (const Json& t : type.as_array()) {
    uint8_t bits = t.is_string() ? type_bits(t.as_string()) : 0;
    if (bits == 0) return 0;
    mask |= bits;
  }
  return mask;
}

uint8_t value_type(const Json& v) {
  switch (v.type()) {
    case Json::Type::kNull: return kTypeNull;
    case Json::Type::kBool: return kTypeBoolean;
    case Json::Type::kInt: return kTypeInteger;
    case Json::Type::kDouble: {
      double d = v.as_double();
      return std::isfinite(d) && d == std::floor(d) ? kTypeInteger : kTypeFraction;
    }
    case Json::Type::kString: return kTypeString;
    case Json::Type::kArray: return kTypeArray;
    case Json::Type::kObject: return kTypeObject;
  }
  return 0;
}

bool json_equal(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::Type::kNull: return true;
    case Json::Type::kBool: return a.as_bool() == b.as_bool();
    case Json::Type::kString: return a.as_string() == b.as_string();
    case Json::Type::kArray: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!json_equal(a.as_array()[i], b.as_array()[i])) return false;
      }
      return true;
    }
    case Json::Type::kObject: {
      if (a.size() != b.size()) return false;
      for (const auto& [key, value] : a.as_object()) {
        const Json* other = b.find(key);
        if (other == nullptr || !json_equal(value, *other)) return false;
      }
      return true;
    }
    default: return false;
  }
}

bool json_in(const Json& value, const Json& values) {
  if (!values.is_array()) return false;
  for (const Json& v : values.as_array()) {
    if (json_equal(value, v)) return true;
  }
  return false;
}

bool values_match_type(const Json* values, const Json& type, bool single) {
  uint8_t mask = type_mask(type);
  if (values == nullptr || mask == 0) return false;
  if (single) return (value_type(*values) & mask) != 0;
  if (!values->is_array()) return false;
  for (const Json& v : values->as_array()) {
    if ((value_type(v) & mask) == 0) return false;
  }
  return true;
}

const Json* resolve_ref(const Json& root, const std::string& uri, std::string* path) {
  path->clear();
  if (uri == "#") return &root;
  if (uri.rfind("#/", 0) != 0) return nullptr;
  std::string pointer = percent_decode(std::string_view(uri).substr(2));
  const Json* cur = &root;
  for (size_t start = 0;;) {
    size_t end = pointer.find('/', start);
    std::string raw = pointer.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string token = unescape_token(raw);
    *path += "/" + raw;
    if (cur->is_object()) {
      cur = cur->find(token);
    } else if (cur->is_array()) {
      bool digits = !token.empty() && token.size() <= 9 && (token.size() == 1 || token[0] != '0') &&
                    token.find_first_not_of("0123456789") == std::string::npos;
      size_t index = digits ? std::stoul(token) : SIZE_MAX;
      cur = index < cur->size() ? &cur->as_array()[index] : nullptr;
    } else {
      cur = nullptr;
    }
    if (cur == nullptr || end == std::string::npos) break;
    start = end + 1;
  }
  return cur;
}

std::optional<std::string> find_duplicate_key(const Json& doc) {
  if (doc.is_array()) {
    for (size_t i = 0; i < doc.size(); ++i) {
      if (auto p = find_duplicate_key(doc.as_array()[i])) return "/" + std::to_string(i) + *p;
    }
  } else if (doc.is_object()) {
    const Json::Object& obj = doc.as_object();
    std::unordered_set<std::string_view> keys;
    for (const auto& [key, value] : obj) {
      if (!keys.insert(key).second) return std::string();
    }
    for (size_t i = 0; i < obj.size(); ++i) {
      if (auto p = find_duplicate_key(obj[i].second)) return "/" + obj[i].first + *p;
    }
  }
  return std::nullopt;
}

bool oneof_disjoint(const Json& root, const Json& options) {
  if (!options.is_array()) return false;
  std::vector<Shape> shapes;
  for (const Json& o : options.as_array()) shapes.push_back(shape_of(root, o));
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = i + 1; j < shapes.size(); ++j) {
      if (!disjoint(shapes[i], shapes[j])) return false;
    }
  }
  return true;
}

}  // namespace kvasir::structured
