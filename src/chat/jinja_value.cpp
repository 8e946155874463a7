#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja_pystr.h"
#include "common/check.h"
#include "common/utf8.h"

namespace kvasir::jinja {

Status type_error(std::string msg) { return invalid_argument(std::move(msg)); }

Value Value::undefined(std::string message) {
  Value v;
  v.p_ = std::make_shared<std::string>(std::move(message));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.p_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

void Value::set_children(const ValueList& items) {
  int d = 0;
  for (const Value& c : items) {
    d = std::max(d, static_cast<int>(c.depth_));
    has_ns_ = has_ns_ || c.has_ns_;
  }
  depth_ = static_cast<uint16_t>(std::min(d + 1, 65535));
}
Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.set_children(items);
  v.p_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::dict(DictData d) {
  Value v;
  v.kind_ = Kind::kDict;
  int depth = 0;
  for (const auto& [k, x] : d.entries) {
    depth = std::max({depth, static_cast<int>(k.depth_), static_cast<int>(x.depth_)});
    v.has_ns_ = v.has_ns_ || k.has_ns_ || x.has_ns_;
  }
  v.depth_ = static_cast<uint16_t>(std::min(depth + 1, 65535));
  v.p_ = std::make_shared<DictData>(std::move(d));
  return v;
}
Value Value::iterator(ValueList items, std::string repr) {
  Value v;
  v.kind_ = Kind::kIterator;
  v.set_children(items);
  auto it = std::make_shared<IteratorData>();
  it->items = std::move(items);
  it->repr = std::move(repr);
  v.p_ = std::move(it);
  return v;
}
Value Value::ns(NamespaceData n) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.has_ns_ = true;
  v.depth_ = 1;
  v.p_ = std::make_shared<NamespaceData>(std::move(n));
  return v;
}
Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.has_ns_ = true;  // a macro reaches scopes that may hold namespaces
  v.p_ = std::move(c);
  return v;
}
Value Value::loop(std::shared_ptr<LoopData> l) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.depth_ = 1;
  for (const Value& c : *l->items) {
    v.depth_ = static_cast<uint16_t>(std::max<int>(v.depth_, c.depth_ + 1));
    v.has_ns_ = v.has_ns_ || c.has_ns_;
  }
  v.p_ = std::move(l);
  return v;
}

const std::string& Value::as_string() const {
  static const std::string kEmpty;
  if (kind_ != Kind::kString && kind_ != Kind::kUndefined) return kEmpty;
  if (!p_) return kEmpty;
  return *static_cast<const std::string*>(p_.get());
}
const ValueList& Value::as_list() const {
  KVASIR_CHECK(kind_ == Kind::kList || kind_ == Kind::kTuple);
  return *static_cast<const ValueList*>(p_.get());
}
const DictData& Value::as_dict() const {
  KVASIR_CHECK(kind_ == Kind::kDict);
  return *static_cast<const DictData*>(p_.get());
}
IteratorData& Value::as_iterator() const {
  KVASIR_CHECK(kind_ == Kind::kIterator);
  return *static_cast<IteratorData*>(p_.get());
}
NamespaceData& Value::as_namespace() const {
  KVASIR_CHECK(kind_ == Kind::kNamespace);
  return *static_cast<NamespaceData*>(p_.get());
}
Callable& Value::as_callable() const {
  KVASIR_CHECK(kind_ == Kind::kCallable);
  return *static_cast<Callable*>(p_.get());
}
LoopData& Value::as_loop() const {
  KVASIR_CHECK(kind_ == Kind::kLoop);
  return *static_cast<LoopData*>(p_.get());
}

bool hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kList: case Kind::kDict: case Kind::kNamespace:
      return false;
    case Kind::kTuple:
      for (const Value& x : v.as_list()) {
        if (!hashable(x)) return false;
      }
      return true;
    default:
      return true;
  }
}

const Value* DictData::find(std::string_view key) const {
  auto it = str_index.find(std::string(key));
  return it == str_index.end() ? nullptr : &entries[it->second].second;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (!k.is_string() && equal(k, key)) return &v;
  }
  return nullptr;
}

Status DictData::insert(Value key, Value value) {
  if (!hashable(key)) return type_error(std::string("unhashable type: '") + type_name(key) + "'");
  if (key.is_string()) {
    auto [it, fresh] = str_index.emplace(key.as_string(), entries.size());
    if (!fresh) {
      entries[it->second].second = std::move(value);
      return Status();
    }
  } else {
    for (auto& [k, v] : entries) {
      if (!k.is_string() && equal(k, key)) {
        v = std::move(value);
        return Status();
      }
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
  return Status();
}

const Value* NamespaceData::find(std::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void NamespaceData::set(const std::string& name, Value v) {
  for (auto& [k, x] : attrs) {
    if (k == name) {
      x = std::move(v);
      return;
    }
  }
  attrs.emplace_back(name, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return v.as_bool();
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_float() != 0;
    case Kind::kString: return !v.as_string().empty();
    case Kind::kList: case Kind::kTuple: return !v.as_list().empty();
    case Kind::kDict: return v.as_dict().size() != 0;
    default: return true;
  }
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kIterator: return "generator";
    case Kind::kNamespace: return "TemplateNamespace";
    case Kind::kCallable: return "function";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(type_name(v)) + " object";
}

static void repr_to(const Value& v, std::string& out, size_t max_bytes);

std::string to_str(const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return v.as_string();
    default: return repr(v, max_bytes);
  }
}

// Every element writes at least one byte, so the work done is bounded by max_bytes plus the
// largest single string's repr.
static void repr_to(const Value& v, std::string& out, size_t max_bytes) {
  if (out.size() > max_bytes) return;
  switch (v.kind()) {
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += py::float_repr(v.as_float()); return;
    case Kind::kString:
      if (v.is_markup()) {
        out += "Markup(" + py::repr(v.as_string()) + ")";
      } else {
        out += py::repr(v.as_string());
      }
      return;
    case Kind::kList: case Kind::kTuple: {
      const ValueList& items = v.as_list();
      bool tup = v.kind() == Kind::kTuple;
      out += tup ? '(' : '[';
      for (size_t i = 0; i < items.size() && out.size() <= max_bytes; ++i) {
        if (i) out += ", ";
        repr_to(items[i], out, max_bytes);
      }
      if (tup && items.size() == 1) out += ',';
      out += tup ? ')' : ']';
      return;
    }
    case Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.as_dict().entries) {
        if (out.size() > max_bytes) break;
        if (!first) out += ", ";
        first = false;
        repr_to(k, out, max_bytes);
        out += ": ";
        repr_to(x, out, max_bytes);
      }
      out += '}';
      return;
    }
    case Kind::kIterator: out += v.as_iterator().repr; return;
    case Kind::kNamespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.as_namespace().attrs) {
        if (out.size() > max_bytes) break;
        if (!first) out += ", ";
        first = false;
        out += py::repr(k);
        out += ": ";
        repr_to(x, out, max_bytes);
      }
      out += "}>";
      return;
    }
    case Kind::kCallable: out += v.as_callable().repr(); return;
    case Kind::kLoop: {
      const LoopData& l = v.as_loop();
      out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items->size()) + ">";
      return;
    }
  }
}

std::string repr(const Value& v, size_t max_bytes) {
  std::string out;
  repr_to(v, out, max_bytes);
  return out;
}

std::string message_repr(const Value& v) {
  constexpr size_t kMax = 200;
  std::string out = repr(v, kMax);
  if (out.size() > kMax) {
    out.resize(utf8_complete_prefix(std::string_view(out).substr(0, kMax)));  // whole characters
    out += "...";
  }
  return out;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return &a.as_string() == &b.as_string() || a.as_string() == b.as_string();
    case Kind::kList: case Kind::kTuple: {
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (&x == &y) return true;  // one shared list ([l] * n): no need to walk it
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    }
    case Kind::kIterator: return &a.as_iterator() == &b.as_iterator();
    case Kind::kNamespace: return &a.as_namespace() == &b.as_namespace();
    case Kind::kCallable: return &a.as_callable() == &b.as_callable();
    case Kind::kLoop: return &a.as_loop() == &b.as_loop();
    default: return false;
  }
}

StatusOr<int> compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) return invalid_argument(a.as_string());
  if (b.is_undefined()) return invalid_argument(b.as_string());
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);  // NaN compares as equal-ish: every op false below
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    if (&a.as_string() == &b.as_string()) return 0;
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return type_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

StatusOr<ValueList> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return ValueList{};
    case Kind::kList: case Kind::kTuple: return v.as_list();
    case Kind::kDict: {
      ValueList keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [k, x] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t b = i;
        py::next_cp(s, &i);
        chars.push_back(Value::string(s.substr(b, i - b)));
      }
      return chars;
    }
    case Kind::kIterator: {
      IteratorData& it = v.as_iterator();
      ValueList rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return rest;
    }
    default:
      return type_error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

StatusOr<int64_t> length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(py::cp_length(v.as_string()));
    case Kind::kList: case Kind::kTuple: return static_cast<int64_t>(v.as_list().size());
    case Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    default:
      return type_error(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

StatusOr<Value> from_json(const Json& j, int max_depth) {
  if (max_depth < 0) return out_of_range("input JSON is nested too deeply for the template engine");
  switch (j.type()) {
    case Json::Type::kNull: return Value::none();
    case Json::Type::kBool: return Value::boolean(j.as_bool());
    case Json::Type::kInt: return Value::integer(j.as_int());
    case Json::Type::kDouble: return Value::real(j.as_double());
    case Json::Type::kString: return Value::string(j.as_string());
    case Json::Type::kArray: {
      ValueList items;
      items.reserve(j.as_array().size());
      for (const Json& x : j.as_array()) {
        KVASIR_ASSIGN_OR_RETURN(Value v, from_json(x, max_depth - 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case Json::Type::kObject: {
      DictData d;
      for (const auto& [k, x] : j.as_object()) {
        KVASIR_ASSIGN_OR_RETURN(Value v, from_json(x, max_depth - 1));
        KVASIR_RETURN_IF_ERROR(d.insert(Value::string(k), std::move(v)));
      }
      return Value::dict(std::move(d));
    }
  }
  return Value::none();
}

}  // namespace kvasir::jinja
