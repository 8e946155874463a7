// Jinja's builtin filters as jinja2 3.1 defines them, plus HF's tojson override
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)). Filters that
// return generators in jinja (map, select, items, ...) return one-shot iterators here too, so
// `|length` on them fails and `|list` is needed, exactly as in Python.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {
namespace {

using Args = std::vector<const Value*>;

constexpr const char* kSupported[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first",
    "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map",
    "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "truncate", "unique", "upper", "wordcount"};
constexpr const char* kUnsupported[] = {"filesizeformat", "groupby", "pprint", "random", "slice", "striptags",
                                        "urlencode", "urlize", "wordwrap", "xmlattr"};

bool is_true(const Value* v, bool def) { return v ? truthy(*v) : def; }

StatusOr<Value> do_tojson(Interpreter& in, const Value& v, const CallArgs& args) {
  Args a;
  KVASIR_RETURN_IF_ERROR(bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonDumpOptions o;
  o.ensure_ascii = is_true(a[0], false);
  o.sort_keys = is_true(a[3], false);
  if (a[1] && !a[1]->is_none()) {
    o.has_indent = true;
    if (a[1]->is_string()) {
      o.indent = a[1]->as_string();
    } else if (a[1]->is_int()) {
      if (a[1]->as_int() > 64) return out_of_range("tojson indent is larger than the limit");
      o.indent.assign(static_cast<size_t>(std::max<int64_t>(0, a[1]->as_int())), ' ');
    } else {
      return type_error("indent must be an int or a str");
    }
    o.item_sep = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_sequence() || a[2]->as_list().size() != 2 || !a[2]->as_list()[0].is_string() ||
        !a[2]->as_list()[1].is_string()) {
      return type_error("separators must be a pair of strings");
    }
    o.item_sep = a[2]->as_list()[0].as_string();
    o.key_sep = a[2]->as_list()[1].as_string();
  }
  // The text is about as long as the walk (a shared value prints every time it is reached).
  KVASIR_RETURN_IF_ERROR(in.charge_deep(v));
  KVASIR_ASSIGN_OR_RETURN(std::string s, dump_json(v, o));
  KVASIR_RETURN_IF_ERROR(in.check_size(s.size()));
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(s.size()));
  return Value::string(std::move(s));
}

StatusOr<Value> do_indent(Interpreter& in, const Value& v, const CallArgs& args) {
  Args a;
  KVASIR_RETURN_IF_ERROR(bind_args("indent", args, {"width", "first", "blank"}, &a));
  std::string ind = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      ind = a[0]->as_string();
    } else if (a[0]->is_int()) {
      if (a[0]->as_int() > 1024) return out_of_range("indent width is larger than the limit");
      ind.assign(static_cast<size_t>(std::max<int64_t>(0, a[0]->as_int())), ' ');
    } else {
      return type_error("can't multiply sequence by non-int");
    }
  }
  if (v.is_undefined()) return invalid_argument(v.as_string());
  if (!v.is_string()) return type_error(std::string("unsupported operand type(s) for +=: '") + type_name(v) + "' and 'str'");
  std::vector<std::string> lines = py::splitlines(v.as_string() + "\n", false, in.steps_left());
  KVASIR_RETURN_IF_ERROR(in.charge(lines.size()));
  KVASIR_RETURN_IF_ERROR(in.check_size(v.as_string().size() + lines.size() * ind.size()));
  std::string rv;
  if (is_true(a[2], false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  if (is_true(a[1], false)) rv = ind + rv;
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(rv.size()));
  return Value::string(std::move(rv));
}

std::optional<double> parse_py_float(std::string s) {
  s = py::strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean += s[i];
  }
  std::string low = py::lower(clean);
  std::string body = (!low.empty() && (low[0] == '+' || low[0] == '-')) ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double d = body == "nan" ? NAN : INFINITY;
    return low[0] == '-' ? -d : d;
  }
  if (clean.empty() || clean.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

StatusOr<Value> do_int(const Value& v, const CallArgs& args) {
  Args a;
  KVASIR_RETURN_IF_ERROR(bind_args("int", args, {"default", "base"}, &a));
  Value dflt = a[0] ? *a[0] : Value::integer(0);
  int64_t base = a[1] && a[1]->is_int() ? a[1]->as_int() : 10;
  if (v.is_undefined()) return invalid_argument(v.as_string());
  if (v.is_int()) return Value::integer(v.as_int());
  auto from_double = [&](double d) -> Value {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.kind() == Kind::kFloat) return from_double(v.as_float());
  if (!v.is_string()) return dflt;
  std::string s = py::strip(v.as_string(), std::nullopt, true, true);
  std::string clean;
  for (char c : s) {
    if (c != '_') clean += c;
  }
  if (!clean.empty() && base >= 2 && base <= 36) {
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(clean.c_str(), &end, static_cast<int>(base));
    if (end == clean.c_str() + clean.size() && errno == 0 && clean.find_first_of(" \t") == std::string::npos) {
      return Value::integer(x);
    }
  }
  if (auto d = parse_py_float(v.as_string())) return from_double(*d);
  return dflt;
}

}  // namespace

bool filter_exists(std::string_view name) {
  for (const char* n : kSupported) {
    if (name == n) return true;
  }
  for (const char* n : kUnsupported) {
    if (name == n) return true;
  }
  return false;
}

StatusOr<Value> apply_filter(Interpreter& in, std::string_view name, Value v, CallArgs args) {
  Args a;
  const std::string fn(name);
  auto bind = [&](std::initializer_list<const char*> names) { return bind_args(fn.c_str(), args, names, &a); };
  KVASIR_RETURN_IF_ERROR(in.charge_walk(v));
  if (name == "default" || name == "d") {
    KVASIR_RETURN_IF_ERROR(bind({"default_value", "boolean"}));
    if (v.is_undefined() || (is_true(a[1], false) && !truthy(v))) return a[0] ? *a[0] : Value::string("");
    return v;
  }
  if (name == "length" || name == "count") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    KVASIR_ASSIGN_OR_RETURN(int64_t n, length(v));
    return Value::integer(n);
  }
  if (name == "tojson") return do_tojson(in, v, args);
  if (name == "string") {
    if (v.is_markup()) return v;
    KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
    return Value::string(std::move(s));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "escape" ||
      name == "e" || name == "forceescape" || name == "safe" || name == "wordcount") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
    // Markup survives the str methods these filters call (soft_str keeps it).
    auto keep = [&](std::string r) { return v.is_markup() ? Value::markup(std::move(r)) : Value::string(std::move(r)); };
    if (name == "upper") return keep(py::upper(s));
    if (name == "lower") return keep(py::lower(s));
    if (name == "capitalize") return keep(py::capitalize(s));
    if (name == "safe") return Value::markup(std::move(s));
    if (v.is_markup() && name != "forceescape" && name != "wordcount" && name != "title") return v;
    if (name == "wordcount") {
      int64_t n = 0;
      bool in_word = false;
      for (size_t i = 0; i < s.size();) {
        bool w = py::is_word(py::next_cp(s, &i));
        n += (w && !in_word);
        in_word = w;
      }
      return Value::integer(n);
    }
    if (name == "title") {
      // jinja: split on runs of [-\s({\[<]; each other piece gets piece[0].upper() + piece[1:].lower().
      std::string out, word;
      auto flush = [&]() {
        if (word.empty()) return;
        size_t i = 0;
        py::next_cp(word, &i);
        out += py::upper(word.substr(0, i)) + py::lower(word.substr(i));
        word.clear();
      };
      for (size_t i = 0; i < s.size();) {
        size_t b = i;
        uint32_t c = py::next_cp(s, &i);
        if (py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
          flush();
          out += s.substr(b, i - b);
        } else {
          word += s.substr(b, i - b);
        }
      }
      flush();
      return Value::string(std::move(out));
    }
    return Value::markup(html_escape(s));
  }
  if (name == "trim") {
    KVASIR_RETURN_IF_ERROR(bind({"chars"}));
    std::optional<std::string> chars;
    if (a[0] && !a[0]->is_none()) {
      KVASIR_ASSIGN_OR_RETURN(chars, in.str(*a[0]));
    }
    KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
    std::string r = py::strip(s, chars, true, true);
    return v.is_markup() ? Value::markup(std::move(r)) : Value::string(std::move(r));
  }
  if (name == "replace") {
    KVASIR_RETURN_IF_ERROR(bind({"old", "new", "count"}));
    if (!a[0] || !a[1]) return type_error("replace() missing required arguments");
    int64_t count = (a[2] && a[2]->is_int()) ? a[2]->as_int() : -1;
    KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
    KVASIR_ASSIGN_OR_RETURN(std::string from, in.str(*a[0]));
    KVASIR_ASSIGN_OR_RETURN(std::string to, in.str(*a[1]));
    if (to.size() > from.size()) {
      uint64_t worst = (s.size() / std::max<size_t>(from.size(), 1) + 2) * to.size() + s.size();
      KVASIR_RETURN_IF_ERROR(in.check_size(worst));
    }
    return Value::string(py::replace(s, from, to, count));
  }
  if (name == "center" || name == "indent" || name == "truncate" || name == "format") {
    if (name == "indent") return do_indent(in, v, args);
    if (name == "format") {
      if (!args.pos.empty() && !args.kw.empty()) {
        return invalid_argument("can't handle positional and keyword arguments at the same time");
      }
      Value fargs;
      if (!args.kw.empty()) {
        DictData d;
        for (auto& [k, x] : args.kw) KVASIR_RETURN_IF_ERROR(d.insert(Value::string(k), x));
        fargs = Value::dict(std::move(d));
      } else {
        fargs = Value::tuple(args.pos);
      }
      KVASIR_ASSIGN_OR_RETURN(std::string fmt, in.str(v));
      KVASIR_ASSIGN_OR_RETURN(std::string s, percent_format(in, fmt, fargs));
      return Value::string(std::move(s));
    }
    if (name == "center") {
      KVASIR_RETURN_IF_ERROR(bind({"width"}));
      CallArgs m;
      m.pos.push_back(a[0] ? *a[0] : Value::integer(80));
      if (v.is_string()) return call_method(in, v, "center", std::move(m));
      KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
      return call_method(in, Value::string(std::move(s)), "center", std::move(m));
    }
    KVASIR_RETURN_IF_ERROR(bind({"length", "killwords", "end", "leeway"}));
    int64_t len = a[0] && a[0]->is_int() ? a[0]->as_int() : 255;
    std::string end = "...";
    if (a[2]) {
      KVASIR_ASSIGN_OR_RETURN(end, in.str(*a[2]));
    }
    int64_t leeway = a[3] && a[3]->is_int() ? a[3]->as_int() : 5;
    int64_t end_len = static_cast<int64_t>(py::cp_length(end));
    if (len < end_len || leeway < 0) return invalid_argument("truncate: invalid length or leeway");
    KVASIR_ASSIGN_OR_RETURN(int64_t n, length(v));
    if (n <= len + leeway) return v;  // returned as is, whatever its type
    if (!v.is_string()) return type_error(std::string("'") + type_name(v) + "' object has no attribute 'rsplit'");
    std::vector<uint32_t> cps = py::code_points(v.as_string());
    std::string head;
    for (int64_t i = 0; i < len - end_len; ++i) py::append_cp(head, cps[static_cast<size_t>(i)]);
    if (!is_true(a[1], false)) head = py::split(head, std::string(" "), 1, true, 1)[0];
    return Value::string(head + end);
  }
  if (name == "int") return do_int(v, args);
  if (name == "float") {
    KVASIR_RETURN_IF_ERROR(bind({"default"}));
    Value dflt = a[0] ? *a[0] : Value::real(0.0);
    if (v.is_undefined()) return invalid_argument(v.as_string());
    if (v.is_number()) return Value::real(v.as_float());
    if (v.is_string()) {
      if (auto d = parse_py_float(v.as_string())) return Value::real(*d);
    }
    return dflt;
  }
  if (name == "abs") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    if (v.kind() == Kind::kFloat) return Value::real(std::fabs(v.as_float()));
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) return out_of_range("integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    return type_error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
  }
  if (name == "round") {
    KVASIR_RETURN_IF_ERROR(bind({"precision", "method"}));
    int64_t prec = a[0] && a[0]->is_int() ? a[0]->as_int() : 0;
    std::string method = "common";
    if (a[1]) {
      KVASIR_ASSIGN_OR_RETURN(method, in.str(*a[1]));
    }
    if (method != "common" && method != "ceil" && method != "floor") {
      return invalid_argument("method must be common, ceil or floor");
    }
    if (!v.is_number()) return type_error(std::string("type ") + type_name(v) + " doesn't define __round__ method");
    if (method == "common") {
      if (v.is_int()) return Value::integer(v.as_int());
      return Value::real(py::round_half_even(v.as_float(), prec));
    }
    double p = std::pow(10.0, static_cast<double>(prec));
    double x = v.as_float() * p;
    return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
  }
  if (name == "attr") {
    KVASIR_RETURN_IF_ERROR(bind({"name"}));
    if (!a[0] || !a[0]->is_string()) return type_error("attribute name must be a string");
    if (v.kind() == Kind::kDict && method_kind(v, a[0]->as_string()) == 0) {
      return Value::undefined("'dict object' has no attribute '" + a[0]->as_string() + "'");
    }
    return in.getattr(v, a[0]->as_string());
  }
  bool handled = false;
  auto r = apply_seq_filter(in, name, v, args, &handled);
  if (handled) return r;
  if (!filter_exists(name)) return invalid_argument("No filter named '" + fn + "' found.");
  return unimplemented("the '" + fn + "' filter is not supported");
}

}  // namespace kvasir::jinja
