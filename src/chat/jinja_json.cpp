// Python json.dumps over template values, as HF's tojson filter calls it (ensure_ascii, indent,
// separators, sort_keys): Python's escaping, float repr, key coercion and error messages.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja_pystr.h"
#include "chat/jinja_value.h"

namespace kvasir::jinja {

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    size_t b = i;
    uint32_t c = py::next_cp(s, &i);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        uint32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      }
      out += buf;
    } else {
      out.append(s.substr(b, i - b));
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(d);
}

Status dump(const Value& v, const JsonDumpOptions& o, int level, std::string& out) {
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return Status();
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status();
    case Kind::kInt: out += std::to_string(v.as_int()); return Status();
    case Kind::kFloat: out += float_json(v.as_float()); return Status();
    case Kind::kString: json_string(out, v.as_string(), o.ensure_ascii); return Status();
    case Kind::kList: case Kind::kTuple: case Kind::kDict: break;
    default:
      return type_error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
  bool is_dict = v.kind() == Kind::kDict;
  size_t n = is_dict ? v.as_dict().size() : v.as_list().size();
  if (n == 0) {
    out += is_dict ? "{}" : "[]";
    return Status();
  }
  out += is_dict ? '{' : '[';
  std::string nl;
  if (o.has_indent) {
    nl = "\n";
    for (int i = 0; i <= level; ++i) nl += o.indent;
    out += nl;
  }
  if (!is_dict) {
    const ValueList& items = v.as_list();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o.item_sep + nl;
      KVASIR_RETURN_IF_ERROR(dump(items[i], o, level + 1, out));
    }
  } else {
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : v.as_dict().entries) entries.push_back(&e);
    if (o.sort_keys) {
      Status err;
      std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
        if (!err.ok()) return false;
        auto c = compare(a->first, b->first, "<");
        if (!c.ok()) {
          err = c.status();
          return false;
        }
        return *c < 0;
      });
      KVASIR_RETURN_IF_ERROR(err);
    }
    bool first = true;
    for (const auto* e : entries) {
      if (!first) out += o.item_sep + nl;
      first = false;
      const Value& k = e->first;
      switch (k.kind()) {
        case Kind::kString: json_string(out, k.as_string(), o.ensure_ascii); break;
        case Kind::kFloat: json_string(out, float_json(k.as_float()), false); break;
        case Kind::kBool: out += k.as_bool() ? "\"true\"" : "\"false\""; break;
        case Kind::kNone: out += "\"null\""; break;
        case Kind::kInt: out += "\"" + std::to_string(k.as_int()) + "\""; break;
        default:
          return type_error(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
      }
      out += o.key_sep;
      KVASIR_RETURN_IF_ERROR(dump(e->second, o, level + 1, out));
    }
  }
  if (o.has_indent) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent;
  }
  out += is_dict ? '}' : ']';
  return Status();
}

}  // namespace

StatusOr<std::string> dump_json(const Value& v, const JsonDumpOptions& opts) {
  std::string out;
  KVASIR_RETURN_IF_ERROR(dump(v, opts, 0, out));
  return out;
}

}  // namespace kvasir::jinja
