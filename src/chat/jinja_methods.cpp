// Python methods reachable from templates (str, dict, list, tuple, loop), the globals HF installs
// (range, dict, namespace, raise_exception, strftime_now), and argument binding for builtins.
// Mutating methods exist only to be refused, as ImmutableSandboxedEnvironment does.
#include <algorithm>
#include <cstring>

#include "chat/jinja_interp.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {

Status bind_args(const char* fn, const CallArgs& args, std::initializer_list<const char*> names,
                 std::vector<const Value*>* out) {
  out->assign(names.size(), nullptr);
  if (args.pos.size() > names.size()) {
    return type_error(std::string(fn) + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                      std::to_string(args.pos.size()) + " given)");
  }
  for (size_t i = 0; i < args.pos.size(); ++i) (*out)[i] = &args.pos[i];
  for (const auto& [k, v] : args.kw) {
    size_t j = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++j;
    }
    if (j == names.size()) return type_error(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
    if ((*out)[j]) return type_error(std::string(fn) + "() got multiple values for argument '" + k + "'");
    (*out)[j] = &v;
  }
  return Status();
}

namespace {

constexpr const char* kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition",
    "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"};
constexpr const char* kDictMethods[] = {"keys", "values", "items", "get", "copy"};
constexpr const char* kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr const char* kListMethods[] = {"index", "count", "copy"};
constexpr const char* kListMutators[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool in_set(const char* const (&set)[N], std::string_view name) {
  for (const char* s : set) {
    if (name == s) return true;
  }
  return false;
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + type_name(self_) + " object>";
  }
  StatusOr<Value> call(Interpreter& in, CallArgs args) override { return call_method(in, self_, name_, std::move(args)); }

 private:
  Value self_;
  std::string name_;
};

using BuiltinFn = StatusOr<Value> (*)(Interpreter&, CallArgs&);

class Builtin : public Callable {
 public:
  Builtin(const char* name, BuiltinFn fn) : name_(name), fn_(fn) {}
  std::string repr() const override { return std::string("<function ") + name_ + ">"; }
  StatusOr<Value> call(Interpreter& in, CallArgs args) override { return fn_(in, args); }

 private:
  const char* name_;
  BuiltinFn fn_;
};

StatusOr<int64_t> want_int(const Value* v, const char* what, int64_t def) {
  if (!v || v->is_none()) return def;
  if (!v->is_int()) return type_error(std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer (" + what + ")");
  return v->as_int();
}

StatusOr<std::string> want_str(const Value* v, const char* fn) {
  if (!v || !v->is_string()) {
    return type_error(std::string(fn) + "() argument must be str, not " + (v ? type_name(*v) : "nothing"));
  }
  return v->as_string();
}

// Python's (start, end) arguments of find/count/startswith, as byte offsets into s.
Status sub_range(const std::string& s, const Value* start, const Value* end, size_t* b, size_t* e) {
  KVASIR_ASSIGN_OR_RETURN(int64_t st, want_int(start, "start", 0));
  KVASIR_ASSIGN_OR_RETURN(int64_t en, want_int(end, "end", INT64_MAX));
  if (py::is_ascii(s)) {
    int64_t n = static_cast<int64_t>(s.size());
    auto fix = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
    *b = static_cast<size_t>(fix(st));
    *e = static_cast<size_t>(std::max(fix(st), fix(en)));
    return Status();
  }
  std::vector<size_t> offs;
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    py::next_cp(s, &i);
  }
  offs.push_back(s.size());
  int64_t n = static_cast<int64_t>(offs.size()) - 1;
  auto fix = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  *b = offs[static_cast<size_t>(fix(st))];
  *e = offs[static_cast<size_t>(std::max(fix(st), fix(en)))];
  return Status();
}

StatusOr<std::optional<std::string>> opt_str(const Value* v, const char* fn) {
  if (!v || v->is_none()) return std::optional<std::string>();
  KVASIR_ASSIGN_OR_RETURN(std::string s, want_str(v, fn));
  return std::optional<std::string>(std::move(s));
}

// The parts of a split, charged one step each (the split stopped at steps_left() + 1 parts).
StatusOr<Value> str_list(Interpreter& in, std::vector<std::string> parts) {
  KVASIR_RETURN_IF_ERROR(in.charge(parts.size()));
  ValueList out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

template <typename Pred>
Value str_is(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  for (size_t i = 0; i < s.size();) {
    if (!pred(py::next_cp(s, &i))) return Value::boolean(false);
  }
  return Value::boolean(true);
}

StatusOr<Value> pad(const std::string& s, const Value* width, const Value* fill, int align) {
  KVASIR_ASSIGN_OR_RETURN(int64_t w, want_int(width, "width", 0));
  std::string f = " ";
  if (fill) {
    if (!fill->is_string() || py::cp_length(fill->as_string()) != 1) {
      return type_error("The fill character must be exactly one character long");
    }
    f = fill->as_string();
  }
  int64_t n = static_cast<int64_t>(py::cp_length(s));
  if (w > (1 << 24)) return out_of_range("padding width is larger than the limit");
  if (w <= n) return Value::string(s);
  int64_t total = w - n;
  int64_t left = align < 0 ? 0 : align > 0 ? total : total / 2 + (total & w & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += f;
  return Value::string(std::move(out));
}

StatusOr<Value> str_method(Interpreter& in, const std::string& s, const std::string& m, const CallArgs& args);

}  // namespace

int method_kind(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Kind::kString: return in_set(kStrMethods, name) ? 1 : 0;
    case Kind::kDict: return in_set(kDictMethods, name) ? 1 : in_set(kDictMutators, name) ? 2 : 0;
    case Kind::kList: return in_set(kListMethods, name) ? 1 : in_set(kListMutators, name) ? 2 : 0;
    case Kind::kTuple: return (name == "index" || name == "count") ? 1 : 0;
    default: return 0;
  }
}

Value make_bound_method(const Value& self, const std::string& name) {
  return Value::callable(std::make_shared<BoundMethod>(self, name));
}

Value unsafe_undefined(const Value& obj, std::string_view attr) {
  return Value::undefined("access to attribute '" + std::string(attr) + "' of '" + type_name(obj) +
                          "' object is unsafe.");
}

StatusOr<Value> call_method(Interpreter& in, const Value& self, const std::string& name, CallArgs args) {
  std::vector<const Value*> a;
  KVASIR_RETURN_IF_ERROR(in.charge_walk(self));
  if (self.kind() == Kind::kLoop) {
    LoopData& l = self.as_loop();
    if (name == "cycle") {
      if (args.pos.empty()) return type_error("no items for cycling given");
      return args.pos[l.index0 % args.pos.size()];
    }
    bool changed = !l.changed_called || l.last_changed.size() != args.pos.size() ||
                   !std::equal(args.pos.begin(), args.pos.end(), l.last_changed.begin(), equal);
    l.changed_called = true;
    l.last_changed = args.pos;
    return Value::boolean(changed);
  }
  if (self.is_markup()) {
    // markupsafe wraps str methods: string arguments are escaped, string results stay Markup.
    for (Value& x : args.pos) {
      if (x.is_string() && !x.is_markup()) x = Value::markup(html_escape(x.as_string()));
    }
    if (name == "join" && !args.pos.empty()) {
      KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(args.pos[0]));
      for (Value& x : items) {
        if (x.is_string() && !x.is_markup()) x = Value::markup(html_escape(x.as_string()));
      }
      args.pos[0] = Value::list(std::move(items));
    }
    KVASIR_ASSIGN_OR_RETURN(Value r, str_method(in, self.as_string(), name, args));
    if (r.is_string()) return Value::markup(r.as_string());
    if (r.is_sequence()) {
      ValueList items;
      for (const Value& x : r.as_list()) items.push_back(x.is_string() ? Value::markup(x.as_string()) : x);
      return r.kind() == Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    return r;
  }
  if (self.is_string()) return str_method(in, self.as_string(), name, args);
  if (self.kind() == Kind::kDict) {
    const DictData& d = self.as_dict();
    if (name == "get") {
      KVASIR_RETURN_IF_ERROR(bind_args("get", args, {"key", "default"}, &a));
      if (!a[0]) return type_error("get expected at least 1 argument, got 0");
      if (!hashable(*a[0])) return type_error(std::string("unhashable type: '") + type_name(*a[0]) + "'");
      if (const Value* v = d.find(*a[0])) return *v;
      return a[1] ? *a[1] : Value::none();
    }
    if (!args.pos.empty() || !args.kw.empty()) return type_error(name + "() takes no arguments");
    KVASIR_RETURN_IF_ERROR(in.charge(d.size()));
    if (name == "copy") return self;
    ValueList out;
    for (const auto& [k, v] : d.entries) {
      if (name == "keys") out.push_back(k);
      else if (name == "values") out.push_back(v);
      else out.push_back(Value::tuple({k, v}));
    }
    return Value::list(std::move(out));
  }
  if (self.is_sequence()) {
    const ValueList& items = self.as_list();
    if (name == "copy") return self;
    KVASIR_RETURN_IF_ERROR(bind_args(name.c_str(), args, {"value"}, &a));
    if (!a[0]) return type_error(name + "() takes exactly one argument (0 given)");
    KVASIR_RETURN_IF_ERROR(in.charge_deep(self));  // each equal() walks at most its item
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equal(items[i], *a[0])) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") return invalid_argument(message_repr(*a[0]) + " is not in " + type_name(self));
    return Value::integer(n);
  }
  return type_error("'" + name + "' is not callable on " + type_name(self));
}

namespace {

StatusOr<Value> str_method(Interpreter& in, const std::string& s, const std::string& m, const CallArgs& args) {
  std::vector<const Value*> a;
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(s.size()));
  if (m == "format") {
    KVASIR_ASSIGN_OR_RETURN(std::string out, str_format(in, s, args));
    return Value::string(std::move(out));
  }
  if (m == "upper") return Value::string(py::upper(s));
  if (m == "lower" || m == "casefold") return Value::string(py::lower(s));
  if (m == "title") return Value::string(py::str_title(s));
  if (m == "capitalize") return Value::string(py::capitalize(s));
  if (m == "swapcase") return Value::string(py::swapcase(s));
  if (m == "isalnum") return str_is(s, py::is_alnum);
  if (m == "isalpha") return str_is(s, py::is_alpha);
  if (m == "isdigit" || m == "isdecimal" || m == "isnumeric") return str_is(s, py::is_digit);
  if (m == "isspace") return str_is(s, py::is_space);
  if (m == "islower" || m == "isupper") {
    bool up = m == "isupper", cased = false;
    for (size_t i = 0; i < s.size();) {
      uint32_t c = py::next_cp(s, &i);
      if (up ? py::is_lower(c) : py::is_upper(c)) return Value::boolean(false);
      cased = cased || py::is_cased(c);
    }
    return Value::boolean(cased);
  }
  if (m == "istitle") return Value::boolean(!s.empty() && py::str_title(s) == s && py::lower(s) != s);
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"chars"}, &a));
    KVASIR_ASSIGN_OR_RETURN(auto chars, opt_str(a[0], m.c_str()));
    return Value::string(py::strip(s, chars, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"sep", "maxsplit"}, &a));
    KVASIR_ASSIGN_OR_RETURN(auto sep, opt_str(a[0], m.c_str()));
    KVASIR_ASSIGN_OR_RETURN(int64_t maxsplit, want_int(a[1], "maxsplit", -1));
    if (sep && sep->empty()) return invalid_argument("empty separator");
    return str_list(in, py::split(s, sep, maxsplit, m == "rsplit", in.steps_left()));
  }
  if (m == "splitlines") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"keepends"}, &a));
    return str_list(in, py::splitlines(s, a[0] && truthy(*a[0]), in.steps_left()));
  }
  if (m == "startswith" || m == "endswith") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"prefix", "start", "end"}, &a));
    if (!a[0]) return type_error(m + "() takes at least 1 argument (0 given)");
    size_t b = 0, e = 0;
    KVASIR_RETURN_IF_ERROR(sub_range(s, a[1], a[2], &b, &e));
    std::string_view view = std::string_view(s).substr(b, e - b);
    ValueList cands = a[0]->kind() == Kind::kTuple ? a[0]->as_list() : ValueList{*a[0]};
    for (const Value& c : cands) {
      KVASIR_ASSIGN_OR_RETURN(std::string p, want_str(&c, m.c_str()));
      bool hit = m == "startswith" ? view.substr(0, p.size()) == p
                                   : (view.size() >= p.size() && view.substr(view.size() - p.size()) == p);
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"sub", "start", "end"}, &a));
    KVASIR_ASSIGN_OR_RETURN(std::string sub, want_str(a[0], m.c_str()));
    size_t b = 0, e = 0;
    KVASIR_RETURN_IF_ERROR(sub_range(s, a[1], a[2], &b, &e));
    std::string_view view = std::string_view(s).substr(b, e - b);
    if (m == "count") return Value::integer(py::count(view, sub));
    size_t f = (m[0] == 'r') ? py::rfind_sub(view, sub) : py::find_sub(view, sub);
    if (f == std::string_view::npos) {
      if (m == "index" || m == "rindex") return invalid_argument("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(py::cp_index_of_byte(s, b + f));
  }
  if (m == "replace") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"old", "new", "count"}, &a));
    KVASIR_ASSIGN_OR_RETURN(std::string from, want_str(a[0], "replace"));
    KVASIR_ASSIGN_OR_RETURN(std::string to, want_str(a[1], "replace"));
    KVASIR_ASSIGN_OR_RETURN(int64_t count, want_int(a[2], "count", -1));
    uint64_t worst = from.empty() ? (s.size() + 1) * to.size() + s.size() : (s.size() / from.size() + 1) * to.size() + s.size();
    if (to.size() > from.size()) KVASIR_RETURN_IF_ERROR(in.check_size(worst));
    return Value::string(py::replace(s, from, to, count));
  }
  if (m == "join") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"iterable"}, &a));
    if (!a[0]) return type_error("join() takes exactly one argument (0 given)");
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(*a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) + " found");
      }
      if (i) out += s;
      out += items[i].as_string();
      KVASIR_RETURN_IF_ERROR(in.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (m == "center" || m == "ljust" || m == "rjust") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"width", "fillchar"}, &a));
    return pad(s, a[0], a[1], m == "ljust" ? -1 : m == "rjust" ? 1 : 0);
  }
  if (m == "zfill") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"width"}, &a));
    KVASIR_ASSIGN_OR_RETURN(int64_t w, want_int(a[0], "width", 0));
    int64_t n = static_cast<int64_t>(py::cp_length(s));
    if (w > (1 << 24)) return out_of_range("padding width is larger than the limit");
    if (w <= n) return Value::string(s);
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(w - n), '0') + s.substr(sign));
  }
  if (m == "partition" || m == "rpartition") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"sep"}, &a));
    KVASIR_ASSIGN_OR_RETURN(std::string sep, want_str(a[0], m.c_str()));
    if (sep.empty()) return invalid_argument("empty separator");
    size_t f = m == "partition" ? py::find_sub(s, sep) : py::rfind_sub(s, sep);
    if (f == std::string::npos) {
      return m == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                              : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))});
  }
  if (m == "removeprefix" || m == "removesuffix") {
    KVASIR_RETURN_IF_ERROR(bind_args(m.c_str(), args, {"affix"}, &a));
    KVASIR_ASSIGN_OR_RETURN(std::string x, want_str(a[0], m.c_str()));
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (m == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  return unimplemented("str." + m + "() is not supported");
}

StatusOr<Value> fn_range(Interpreter& in, CallArgs& args) {
  if (!args.kw.empty()) return type_error("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3) return type_error("range expected 1 to 3 arguments");
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (!args.pos[i].is_int()) {
      return type_error(std::string("'") + type_name(args.pos[i]) + "' object cannot be interpreted as an integer");
    }
  }
  if (args.pos.size() == 1) {
    v[1] = args.pos[0].as_int();
  } else {
    for (size_t i = 0; i < args.pos.size(); ++i) v[i] = args.pos[i].as_int();
  }
  if (v[2] == 0) return invalid_argument("range() arg 3 must not be zero");
  __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1];
  __int128 step = v[2] > 0 ? v[2] : -(__int128)v[2];
  __int128 n = span <= 0 ? 0 : (span + step - 1) / step;
  if (n > in.limits().max_range) {
    return out_of_range("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" +
                        std::to_string(in.limits().max_range) + ").");
  }
  KVASIR_RETURN_IF_ERROR(in.charge(static_cast<uint64_t>(n)));
  ValueList out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    out.push_back(Value::integer(static_cast<int64_t>(static_cast<__int128>(v[0]) + static_cast<__int128>(i) * v[2])));
  }
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python: a mapping or an iterable of pairs, then keywords.
StatusOr<DictData> build_dict(Interpreter& in, CallArgs& args, const char* fn) {
  if (args.pos.size() > 1) return type_error(std::string(fn) + " expected at most 1 argument");
  DictData d;
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.kind() == Kind::kDict) {
      d = src.as_dict();
    } else {
      KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(src));
      for (const Value& it : items) {
        KVASIR_ASSIGN_OR_RETURN(ValueList kv, in.iterate(it));
        if (kv.size() != 2) return invalid_argument("dictionary update sequence element has wrong length");
        KVASIR_RETURN_IF_ERROR(d.insert(kv[0], kv[1]));
      }
    }
  }
  for (auto& [k, v] : args.kw) KVASIR_RETURN_IF_ERROR(d.insert(Value::string(k), std::move(v)));
  return d;
}

StatusOr<Value> fn_dict(Interpreter& in, CallArgs& args) {
  KVASIR_ASSIGN_OR_RETURN(DictData d, build_dict(in, args, "dict"));
  return Value::dict(std::move(d));
}

StatusOr<Value> fn_namespace(Interpreter& in, CallArgs& args) {
  KVASIR_ASSIGN_OR_RETURN(DictData d, build_dict(in, args, "namespace"));
  NamespaceData ns;
  for (auto& [k, v] : d.entries) {
    if (!k.is_string()) return type_error("namespace attribute names must be strings");
    if (!k.as_string().empty() && k.as_string()[0] == '_') {
      return invalid_argument("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                              k.as_string() + "'. Please rename the attribute.");
    }
    if (v.holds_namespace()) return invalid_argument("cannot store a namespace or macro inside a namespace");
    ns.attrs.emplace_back(k.as_string(), std::move(v));
  }
  return Value::ns(std::move(ns));
}

StatusOr<Value> fn_raise_exception(Interpreter& in, CallArgs& args) {
  std::vector<const Value*> a;
  KVASIR_RETURN_IF_ERROR(bind_args("raise_exception", args, {"message"}, &a));
  if (!a[0]) return type_error("raise_exception() missing 1 required positional argument: 'message'");
  KVASIR_ASSIGN_OR_RETURN(std::string message, in.str(*a[0]));
  return invalid_argument(message);
}

StatusOr<Value> fn_strftime_now(Interpreter& in, CallArgs& args) {
  std::vector<const Value*> a;
  KVASIR_RETURN_IF_ERROR(bind_args("strftime_now", args, {"format"}, &a));
  KVASIR_ASSIGN_OR_RETURN(std::string fmt, want_str(a[0], "strftime"));
  if (fmt.size() > 4096) return out_of_range("strftime format is too long");
  if (fmt.find('\0') != std::string::npos) return invalid_argument("embedded null character");
  std::vector<char> buf(fmt.size() * 64 + 64);
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &in.now());
  return Value::string(std::string(buf.data(), n));
}

}  // namespace

void add_globals(Scope& scope) {
  auto add = [&](const char* name, BuiltinFn fn) {
    scope.set(name, Value::callable(std::make_shared<Builtin>(name, fn)));
  };
  add("range", fn_range);
  add("dict", fn_dict);
  add("namespace", fn_namespace);
  add("raise_exception", fn_raise_exception);
  add("strftime_now", fn_strftime_now);
}

}  // namespace kvasir::jinja
