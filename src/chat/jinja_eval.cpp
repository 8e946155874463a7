// Expression evaluation: names, attribute/item access with jinja's sandboxed getattr/getitem
// fallbacks, operators with Python semantics, calls, filters and tests.
#include <cmath>

#include "chat/jinja_interp.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {

RecursionGuard::RecursionGuard(Interpreter& in) : in_(in) { ++in_.depth_; }
RecursionGuard::~RecursionGuard() { --in_.depth_; }
bool RecursionGuard::exceeded() const { return in_.depth_ > in_.opts_.limits.max_recursion_depth; }

Status Interpreter::annotate(Status s, int line) {
  if (!s.ok() && error_line_ == 0) error_line_ = line;
  return s;
}

StatusOr<Value> Interpreter::eval(const Expr& e) {
  RecursionGuard g(*this);
  if (g.exceeded()) return annotate(out_of_range("template recursion too deep"), e.line);
  Status st = charge(1);
  if (!st.ok()) return annotate(st, e.line);
  auto r = eval_inner(e);
  if (!r.ok()) return annotate(r.status(), e.line);
  if (r->depth() > opts_.limits.max_value_depth) {
    return annotate(out_of_range("value nested too deeply"), e.line);
  }
  return r;
}

StatusOr<Value> Interpreter::lookup(const std::string& name) const {
  for (Scope* s = scope_.get(); s; s = s->parent.get()) {
    if (Value* v = s->find_local(name)) return *v;
  }
  return Value::undefined("'" + name + "' is undefined");
}

static Status undefined_error(const Value& v) { return invalid_argument(v.as_string()); }

StatusOr<Value> Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst: return e.constant;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kGetattr: {
      KVASIR_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      return getattr(obj, e.name);
    }
    case ExprKind::kGetitem: {
      KVASIR_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      if (e.b->kind == ExprKind::kSlice) return slice(obj, *e.b);
      KVASIR_ASSIGN_OR_RETURN(Value key, eval(*e.b));
      return getitem(obj, key);
    }
    case ExprKind::kTuple: case ExprKind::kList: {
      ValueList items;
      for (const auto& x : e.items) {
        KVASIR_ASSIGN_OR_RETURN(Value v, eval(*x));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        KVASIR_ASSIGN_OR_RETURN(Value k, eval(*e.items[i]));
        KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.items[i + 1]));
        KVASIR_RETURN_IF_ERROR(d.insert(std::move(k), std::move(v)));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kNeg: case ExprKind::kPos: {
      KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      if (v.is_undefined()) return undefined_error(v);
      bool neg = e.kind == ExprKind::kNeg;
      if (v.kind() == Kind::kFloat) return Value::real(neg ? -v.as_float() : v.as_float());
      if (v.is_int()) {
        if (neg && v.as_int() == INT64_MIN) return out_of_range("integer overflow");
        return Value::integer(neg ? -v.as_int() : v.as_int());
      }
      return type_error(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case ExprKind::kNot: {
      KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      return Value::boolean(!truthy(v));
    }
    case ExprKind::kAnd: case ExprKind::kOr: {
      KVASIR_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      if (truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.b);
    }
    case ExprKind::kBinary: {
      KVASIR_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      KVASIR_ASSIGN_OR_RETURN(Value b, eval(*e.b));
      return binary_op(*this, e.op, a, b);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& x : e.items) {
        KVASIR_ASSIGN_OR_RETURN(Value v, eval(*x));
        KVASIR_ASSIGN_OR_RETURN(std::string piece, str(v));
        out += piece;
        KVASIR_RETURN_IF_ERROR(check_size(out.size()));
      }
      KVASIR_RETURN_IF_ERROR(charge_bytes(out.size()));
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCondExpr: {
      KVASIR_ASSIGN_OR_RETURN(Value t, eval(*e.a));
      if (truthy(t)) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kCall: return eval_call(e);
    case ExprKind::kFilter: {
      Value input = block_input_;
      if (e.a) {
        KVASIR_ASSIGN_OR_RETURN(input, eval(*e.a));
      }
      CallArgs args;
      KVASIR_RETURN_IF_ERROR(eval_args(e, &args));
      return filter(e.name, std::move(input), std::move(args));
    }
    case ExprKind::kTest: {
      KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      CallArgs args;
      KVASIR_RETURN_IF_ERROR(eval_args(e, &args));
      KVASIR_ASSIGN_OR_RETURN(bool r, test(e.name, v, std::move(args)));
      return Value::boolean(r);
    }
    case ExprKind::kSlice: case ExprKind::kNSRef:
      break;
  }
  return internal_error("unexpected expression node");
}

static StatusOr<bool> compare_one(Interpreter& in, CmpOp op, const Value& a, const Value& b) {
  KVASIR_RETURN_IF_ERROR(in.charge_deep(a));
  KVASIR_RETURN_IF_ERROR(in.charge_deep(b));
  switch (op) {
    case CmpOp::kEq: return equal(a, b);
    case CmpOp::kNe: return !equal(a, b);
    case CmpOp::kIn: case CmpOp::kNotIn: {
      bool neg = op == CmpOp::kNotIn;
      if (b.is_string()) {
        if (!a.is_string()) {
          return type_error(std::string("'in <string>' requires string as left operand, not ") + type_name(a));
        }
        return (py::find_sub(b.as_string(), a.as_string()) != std::string::npos) != neg;
      }
      if (b.kind() == Kind::kDict) {
        if (!hashable(a)) return type_error(std::string("unhashable type: '") + type_name(a) + "'");
        return (b.as_dict().find(a) != nullptr) != neg;
      }
      if (b.kind() == Kind::kNamespace || b.kind() == Kind::kLoop || b.kind() == Kind::kCallable ||
          b.is_number() || b.is_none()) {
        return type_error(std::string("argument of type '") + type_name(b) + "' is not iterable");
      }
      KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(b));
      for (const Value& x : items) {
        if (equal(x, a)) return !neg;
      }
      return neg;
    }
    default: break;
  }
  const char* sym = op == CmpOp::kLt ? "<" : op == CmpOp::kLtEq ? "<=" : op == CmpOp::kGt ? ">" : ">=";
  KVASIR_ASSIGN_OR_RETURN(int c, compare(a, b, sym));
  if ((a.kind() == Kind::kFloat && std::isnan(a.as_float())) || (b.kind() == Kind::kFloat && std::isnan(b.as_float()))) {
    return false;
  }
  switch (op) {
    case CmpOp::kLt: return c < 0;
    case CmpOp::kLtEq: return c <= 0;
    case CmpOp::kGt: return c > 0;
    default: return c >= 0;
  }
}

StatusOr<Value> Interpreter::eval_compare(const Expr& e) {
  KVASIR_ASSIGN_OR_RETURN(Value left, eval(*e.a));
  for (size_t i = 0; i < e.items.size(); ++i) {
    KVASIR_ASSIGN_OR_RETURN(Value right, eval(*e.items[i]));
    KVASIR_ASSIGN_OR_RETURN(bool ok, compare_one(*this, e.cmp_ops[i], left, right));
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Status Interpreter::eval_args(const Expr& e, CallArgs* args) {
  for (const auto& x : e.items) {
    KVASIR_ASSIGN_OR_RETURN(Value v, eval(*x));
    args->pos.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    KVASIR_ASSIGN_OR_RETURN(Value v, eval(*x));
    args->kw.emplace_back(k, std::move(v));
  }
  if (e.dyn_args) {
    KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.dyn_args));
    KVASIR_ASSIGN_OR_RETURN(ValueList extra, iterate(v));
    for (auto& x : extra) args->pos.push_back(std::move(x));
  }
  if (e.dyn_kwargs) {
    KVASIR_ASSIGN_OR_RETURN(Value v, eval(*e.dyn_kwargs));
    if (v.kind() != Kind::kDict) return type_error("argument after ** must be a mapping");
    for (const auto& [k, x] : v.as_dict().entries) {
      if (!k.is_string()) return type_error("keywords must be strings");
      args->kw.emplace_back(k.as_string(), x);
    }
  }
  return Status();
}

StatusOr<Value> Interpreter::eval_call(const Expr& e) {
  KVASIR_ASSIGN_OR_RETURN(Value callee, eval(*e.a));
  CallArgs args;
  KVASIR_RETURN_IF_ERROR(eval_args(e, &args));
  return call(callee, std::move(args));
}

StatusOr<Value> Interpreter::call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) return undefined_error(callee);
  if (callee.kind() != Kind::kCallable) return type_error(std::string("'") + type_name(callee) + "' object is not callable");
  return callee.as_callable().call(*this, std::move(args));
}

static bool is_dunder(std::string_view name) { return name.size() >= 2 && name[0] == '_' && name[1] == '_'; }

static StatusOr<Value> loop_attr(const Value& obj, const std::string& name) {
  const LoopData& l = obj.as_loop();
  int64_t n = static_cast<int64_t>(l.items->size());
  int64_t i = static_cast<int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") return i > 0 ? (*l.items)[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? (*l.items)[i + 1] : Value::undefined("there is no next item");
  if (name == "cycle" || name == "changed") return make_bound_method(obj, name);
  return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
}

StatusOr<Value> Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (is_dunder(name)) return unsafe_undefined(obj, name);
  switch (obj.kind()) {
    case Kind::kNamespace:
      if (const Value* v = obj.as_namespace().find(name)) return *v;
      break;
    case Kind::kLoop: return loop_attr(obj, name);
    case Kind::kDict: {
      int mk = method_kind(obj, name);
      if (mk == 2) return unsafe_undefined(obj, name);
      if (mk == 1) return make_bound_method(obj, name);
      if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
      break;
    }
    default: {
      int mk = method_kind(obj, name);
      if (mk == 2) return unsafe_undefined(obj, name);
      if (mk == 1) return make_bound_method(obj, name);
      break;
    }
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

StatusOr<Value> Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  switch (obj.kind()) {
    case Kind::kDict:
      if (hashable(key)) {
        if (const Value* v = obj.as_dict().find(key)) return *v;
      }
      break;
    case Kind::kList: case Kind::kTuple: case Kind::kString: {
      if (!key.is_int()) break;
      int64_t i = key.as_int();
      if (obj.is_string()) {
        const std::string& s = obj.as_string();
        KVASIR_RETURN_IF_ERROR(charge(s.size() / 64));  // code point indexing scans the string
        if (py::is_ascii(s)) {
          int64_t n = static_cast<int64_t>(s.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.is_markup() ? Value::markup(std::string(1, s[static_cast<size_t>(i)])) : Value::string(std::string(1, s[static_cast<size_t>(i)]));
        } else {
          std::vector<uint32_t> cps = py::code_points(s);
          int64_t n = static_cast<int64_t>(cps.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            std::string c;
            py::append_cp(c, cps[static_cast<size_t>(i)]);
            return obj.is_markup() ? Value::markup(std::move(c)) : Value::string(std::move(c));
          }
        }
      } else {
        const ValueList& items = obj.as_list();
        int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
      }
      return Value::undefined(object_type_repr(obj) + " has no element " + std::to_string(key.as_int()));
    }
    default:
      break;
  }
  if (key.is_string()) {
    const std::string& name = key.as_string();
    if (is_dunder(name)) return unsafe_undefined(obj, name);
    if (obj.kind() == Kind::kNamespace || obj.kind() == Kind::kLoop) return getattr(obj, name);
    int mk = method_kind(obj, name);
    if (mk == 2) return unsafe_undefined(obj, name);
    if (mk == 1) return make_bound_method(obj, name);
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + message_repr(key));
}

StatusOr<Value> Interpreter::slice(const Value& obj, const Expr& s) {
  // jinja compiles `x[a:b]` to a plain Python subscript (no getitem fallback): errors propagate.
  if (obj.is_undefined()) return undefined_error(obj);
  Value parts[3];
  const ExprPtr* exprs[3] = {&s.a, &s.b, &s.c};
  for (int k = 0; k < 3; ++k) {
    if (*exprs[k]) {
      KVASIR_ASSIGN_OR_RETURN(parts[k], eval(**exprs[k]));
    } else {
      parts[k] = Value::none();
    }
  }
  bool is_str = obj.is_string();
  if (obj.kind() == Kind::kDict) return type_error("unhashable type: 'slice'");
  if (!is_str && !obj.is_sequence()) return type_error(std::string("'") + type_name(obj) + "' object is not subscriptable");
  for (const Value& p : parts) {
    if (!p.is_none() && !p.is_int()) {
      return type_error("slice indices must be integers or None or have an __index__ method");
    }
  }
  int64_t step = parts[2].is_none() ? 1 : parts[2].as_int();
  if (step == 0) return invalid_argument("slice step cannot be zero");
  std::vector<uint32_t> cps;
  if (is_str) KVASIR_RETURN_IF_ERROR(charge(obj.as_string().size() / 64));  // scanned for code points
  bool ascii = is_str && py::is_ascii(obj.as_string());
  if (is_str && !ascii) cps = py::code_points(obj.as_string());
  int64_t n = is_str ? (ascii ? static_cast<int64_t>(obj.as_string().size()) : static_cast<int64_t>(cps.size()))
                     : static_cast<int64_t>(obj.as_list().size());
  auto clamp = [&](const Value& v, bool is_start) {
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
    if (v.is_none()) return (step > 0) == is_start ? lower : upper;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  int64_t start = clamp(parts[0], true), stop = clamp(parts[1], false);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    idx.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // a huge step ends the slice
  }
  KVASIR_RETURN_IF_ERROR(charge(idx.size()));
  if (is_str) {
    std::string out;
    for (size_t i : idx) {
      if (ascii) {
        out += obj.as_string()[i];
      } else {
        py::append_cp(out, cps[i]);
      }
    }
    return obj.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  ValueList out;
  for (size_t i : idx) out.push_back(obj.as_list()[i]);
  return obj.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

static StatusOr<Value> repeat(Interpreter& in, const Value& seq, int64_t times) {
  uint64_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
  // An empty sequence stays empty however many times it is repeated; without this, [] * 10**8
  // would loop 10**8 times while charging nothing.
  if (times < 0 || unit == 0) times = 0;
  if (unit && static_cast<uint64_t>(times) > in.limits().max_string_bytes / unit) {
    return out_of_range("repetition result is larger than the limit");
  }
  uint64_t total = unit * static_cast<uint64_t>(times);
  KVASIR_RETURN_IF_ERROR(seq.is_string() ? in.charge_bytes(total) : in.charge(total));
  if (seq.is_string()) {
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return seq.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

static double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// CPython's float_floor_div (via float_divmod): not simply floor(a / b).
static double py_floordiv(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0 && ((wx < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, vx / wx);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}

StatusOr<Value> binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b) {
  static const char* kSym[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (op == BinOp::kMod && a.is_string() && b.is_undefined()) {
    // str.__mod__ runs before Undefined.__rmod__, and treats Undefined (it has __getitem__) as a mapping.
    KVASIR_ASSIGN_OR_RETURN(std::string s, percent_format(in, a.as_string(), b));
    return a.is_markup() ? Value::markup(std::move(s)) : Value::string(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  auto unsupported = [&]() {
    return type_error(std::string("unsupported operand type(s) for ") + kSym[static_cast<int>(op)] + ": '" +
                      type_name(a) + "' and '" + type_name(b) + "'");
  };
  if ((a.is_markup() || b.is_markup()) && (op == BinOp::kAdd || op == BinOp::kMod)) {
    // markupsafe: Markup + str escapes the str; Markup % args escapes string args.
    if (op == BinOp::kAdd && a.is_string() && b.is_string()) {
      std::string l = a.is_markup() ? a.as_string() : html_escape(a.as_string());
      std::string r = b.is_markup() ? b.as_string() : html_escape(b.as_string());
      KVASIR_RETURN_IF_ERROR(in.check_size(l.size() + r.size()));
      return Value::markup(l + r);
    }
    if (op == BinOp::kMod && a.is_markup()) {
      auto esc = [](const Value& x) { return (x.is_string() && !x.is_markup()) ? Value::markup(html_escape(x.as_string())) : x; };
      Value args = b;
      if (b.kind() == Kind::kTuple) {
        ValueList items;
        for (const Value& x : b.as_list()) items.push_back(esc(x));
        args = Value::tuple(std::move(items));
      } else if (b.kind() != Kind::kDict) {
        args = esc(b);
      }
      KVASIR_ASSIGN_OR_RETURN(std::string s, percent_format(in, a.as_string(), args));
      return Value::markup(std::move(s));
    }
    if (op == BinOp::kAdd) return unsupported();
  }
  bool ints = a.is_int() && b.is_int();
  bool nums = a.is_number() && b.is_number();
  int64_t x = ints ? a.as_int() : 0, y = ints ? b.as_int() : 0, r = 0;
  switch (op) {
    case BinOp::kAdd:
      if (ints) {
        if (__builtin_add_overflow(x, y, &r)) return out_of_range("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() + b.as_float());
      if ((a.is_string() && b.is_string()) || (a.is_sequence() && a.kind() == b.kind())) {
        if (a.is_string()) {
          KVASIR_RETURN_IF_ERROR(in.check_size(a.as_string().size() + b.as_string().size()));
          KVASIR_RETURN_IF_ERROR(in.charge_bytes(a.as_string().size() + b.as_string().size()));
          return Value::string(a.as_string() + b.as_string());
        }
        KVASIR_RETURN_IF_ERROR(in.check_size(a.as_list().size() + b.as_list().size()));
        KVASIR_RETURN_IF_ERROR(in.charge(a.as_list().size() + b.as_list().size()));
        ValueList out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return a.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
      }
      if (a.is_string() || a.is_sequence()) {
        return type_error(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                          type_name(a));
      }
      return unsupported();
    case BinOp::kSub:
      if (ints) {
        if (__builtin_sub_overflow(x, y, &r)) return out_of_range("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() - b.as_float());
      return unsupported();
    case BinOp::kMul:
      if (ints) {
        if (__builtin_mul_overflow(x, y, &r)) return out_of_range("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_float() * b.as_float());
      if ((a.is_string() || a.is_sequence()) && b.is_int()) return repeat(in, a, b.as_int());
      if ((b.is_string() || b.is_sequence()) && a.is_int()) return repeat(in, b, a.as_int());
      if (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence()) {
        const Value& other = (a.is_string() || a.is_sequence()) ? b : a;
        return type_error(std::string("can't multiply sequence by non-int of type '") + type_name(other) + "'");
      }
      return unsupported();
    case BinOp::kDiv:
      if (!nums) return unsupported();
      if (b.as_float() == 0) return invalid_argument("division by zero");
      return Value::real(a.as_float() / b.as_float());
    case BinOp::kFloorDiv: case BinOp::kMod:
      if (a.is_string() && op == BinOp::kMod) {
        KVASIR_ASSIGN_OR_RETURN(std::string s, percent_format(in, a.as_string(), b));
        return Value::string(std::move(s));
      }
      if (!nums) return unsupported();
      if (ints) {
        if (y == 0) return invalid_argument(op == BinOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return op == BinOp::kMod ? Value::integer(0) : StatusOr<Value>(out_of_range("integer overflow"));
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q -= 1;
          m += y;
        }
        return Value::integer(op == BinOp::kMod ? m : q);
      }
      if (b.as_float() == 0) return invalid_argument(op == BinOp::kMod ? "float modulo" : "float floor division by zero");
      if (op == BinOp::kMod) return Value::real(py_fmod(a.as_float(), b.as_float()));
      return Value::real(py_floordiv(a.as_float(), b.as_float()));
    case BinOp::kPow:
      if (ints && y >= 0) {
        int64_t acc = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if (e & 1) {
            if (__builtin_mul_overflow(acc, base, &acc)) return out_of_range("integer overflow");
          }
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) return out_of_range("integer overflow");
        }
        return Value::integer(acc);
      }
      if (!nums) return unsupported();
      if (a.as_float() == 0 && b.as_float() < 0) return invalid_argument("0.0 cannot be raised to a negative power");
      if (a.as_float() < 0 && std::isfinite(b.as_float()) && b.as_float() != std::floor(b.as_float())) {
        return unimplemented("a negative number to a fractional power is complex, which is not supported");
      }
      {
        double r = std::pow(a.as_float(), b.as_float());
        // Python raises OverflowError where C returns inf (only `**` does; `*` overflows to inf).
        if (std::isinf(r) && std::isfinite(a.as_float()) && std::isfinite(b.as_float())) {
          return out_of_range("(34, 'Numerical result out of range')");
        }
        return Value::real(r);
      }
  }
  return unsupported();
}

}  // namespace kvasir::jinja
