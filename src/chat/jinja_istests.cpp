// Jinja's `is` tests (jinja2/tests.py) with Python's type model: bool counts as a number but not an
// integer, Undefined is iterable and a sequence, str is a sequence, and so on.
#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {
namespace {

constexpr const char* kTests[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean", "false", "true",
    "integer", "float", "lower", "upper", "string", "mapping", "number", "sequence", "iterable", "callable",
    "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", ">=", "ge", "<",
    "lt", "lessthan", "<=", "le"};

bool is_cmp(std::string_view n, std::initializer_list<const char*> names) {
  for (const char* x : names) {
    if (n == x) return true;
  }
  return false;
}

}  // namespace

bool test_exists(std::string_view name) {
  for (const char* n : kTests) {
    if (name == n) return true;
  }
  return false;
}

StatusOr<bool> apply_test(Interpreter& in, std::string_view name, const Value& v, CallArgs args) {
  const Kind k = v.kind();
  KVASIR_RETURN_IF_ERROR(in.charge_walk(v));
  for (const Value& x : args.pos) KVASIR_RETURN_IF_ERROR(in.charge_walk(x));
  if (!test_exists(name)) return invalid_argument("No test named '" + std::string(name) + "' found.");
  std::vector<const Value*> a;
  const std::string fn(name);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return k == Kind::kBool;
  if (name == "true") return k == Kind::kBool && v.as_bool();
  if (name == "false") return k == Kind::kBool && !v.as_bool();
  if (name == "integer") return k == Kind::kInt;
  if (name == "float") return k == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return k == Kind::kDict;
  if (name == "sequence") {
    return k == Kind::kUndefined || k == Kind::kString || k == Kind::kList || k == Kind::kTuple || k == Kind::kDict;
  }
  if (name == "iterable") {
    return k == Kind::kUndefined || k == Kind::kString || k == Kind::kList || k == Kind::kTuple || k == Kind::kDict ||
           k == Kind::kIterator || k == Kind::kLoop;
  }
  if (name == "callable") return k == Kind::kCallable || k == Kind::kUndefined || k == Kind::kLoop;
  if (name == "escaped") return v.is_markup();
  if (name == "lower" || name == "upper") {
    CallArgs none;
    KVASIR_ASSIGN_OR_RETURN(std::string s, in.str(v));
    KVASIR_ASSIGN_OR_RETURN(Value r, call_method(in, Value::string(std::move(s)), name == "lower" ? "islower" : "isupper",
                                                 std::move(none)));
    return r.as_bool();
  }
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    return name == "filter" ? filter_exists(v.as_string()) : test_exists(v.as_string());
  }
  if (name == "odd" || name == "even") {
    KVASIR_ASSIGN_OR_RETURN(Value m, binary_op(in, BinOp::kMod, v, Value::integer(2)));
    bool odd = m.is_number() && m.as_float() == 1;
    return name == "odd" ? odd : (m.is_number() && m.as_float() == 0);
  }
  if (name == "divisibleby") {
    KVASIR_RETURN_IF_ERROR(bind_args(fn.c_str(), args, {"num"}, &a));
    if (!a[0]) return type_error("divisibleby() missing 1 required positional argument: 'num'");
    KVASIR_ASSIGN_OR_RETURN(Value m, binary_op(in, BinOp::kMod, v, *a[0]));
    return m.is_number() && m.as_float() == 0;
  }
  if (name == "sameas") {
    KVASIR_RETURN_IF_ERROR(bind_args(fn.c_str(), args, {"other"}, &a));
    if (!a[0]) return type_error("sameas() missing 1 required positional argument: 'other'");
    const Value& o = *a[0];
    if (k != o.kind()) return false;
    if (k == Kind::kNone || k == Kind::kUndefined) return true;
    if (k == Kind::kBool) return v.as_bool() == o.as_bool();
    if (k == Kind::kInt) return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's small ints
    if (k == Kind::kString) return &v.as_string() == &o.as_string();
    if (k == Kind::kFloat) return false;
    if (!(k == Kind::kIterator || k == Kind::kNamespace || k == Kind::kCallable) || !equal(v, o)) return false;
    KVASIR_ASSIGN_OR_RETURN(std::string rv, in.repr(v));
    KVASIR_ASSIGN_OR_RETURN(std::string ro, in.repr(o));
    return rv == ro;
  }
  KVASIR_RETURN_IF_ERROR(bind_args(fn.c_str(), args, {"other"}, &a));
  if (!a[0]) return type_error(fn + "() missing 1 required positional argument");
  const Value& o = *a[0];
  // Comparing walks both values (the shallow charge above only paid for their top level).
  KVASIR_RETURN_IF_ERROR(in.charge_deep(v));
  KVASIR_RETURN_IF_ERROR(in.charge_deep(o));
  if (name == "in") {
    if (o.is_string()) {
      if (!v.is_string()) return type_error("'in <string>' requires string as left operand");
      return py::find_sub(o.as_string(), v.as_string()) != std::string::npos;
    }
    if (o.kind() == Kind::kDict) return hashable(v) && o.as_dict().find(v) != nullptr;
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(o));
    for (const Value& x : items) {
      if (equal(x, v)) return true;
    }
    return false;
  }
  if (is_cmp(name, {"==", "eq", "equalto"})) return equal(v, o);
  if (is_cmp(name, {"!=", "ne"})) return !equal(v, o);
  KVASIR_ASSIGN_OR_RETURN(int c, compare(v, o, ">"));
  if (is_cmp(name, {">", "gt", "greaterthan"})) return c > 0;
  if (is_cmp(name, {">=", "ge"})) return c >= 0;
  if (is_cmp(name, {"<", "lt", "lessthan"})) return c < 0;
  return c <= 0;
}

}  // namespace kvasir::jinja
