// Statement execution: output, if/for/set/macro/call/filter/with blocks, loop controls, scoping,
// and the render entry point with its budgets.
#include <algorithm>
#include <chrono>
#include <vector>

#include "chat/jinja_interp.h"

namespace kvasir::jinja {
namespace {

class Macro : public Callable {
 public:
  Macro(const Stmt* def, std::weak_ptr<Scope> closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {}
  std::string repr() const override { return "<Macro '" + name_ + "'>"; }
  StatusOr<Value> call(Interpreter& in, CallArgs args) override {
    std::shared_ptr<Scope> scope = closure_.lock();
    if (!scope) return internal_error("macro called after its scope ended");
    return in.call_macro(*def_, scope, name_, std::move(args));
  }

 private:
  const Stmt* def_;
  std::weak_ptr<Scope> closure_;  // kept alive by Interpreter::captured_; weak to avoid a cycle
  std::string name_;
};

// Swaps the interpreter's current scope/output buffer for the duration of a block.
template <typename T>
class Swap {
 public:
  Swap(T& slot, T value) : slot_(slot), saved_(std::move(slot)) { slot_ = std::move(value); }
  ~Swap() { slot_ = std::move(saved_); }

 private:
  T& slot_;
  T saved_;
};

using Clock = std::chrono::steady_clock;

}  // namespace

Interpreter::Interpreter(const RenderOptions& opts) : opts_(opts) {
  if (opts.now) {
    now_ = *opts.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &now_);
  }
  deadline_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() +
                 static_cast<int64_t>(opts.limits.max_render_seconds * 1e9);
}

Status Interpreter::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > opts_.limits.max_steps) return out_of_range("template exceeded its evaluation step budget");
  // The clock is read every 16th charge: a step can stand for far more work than its count says
  // (hashing or lowering a 30 MB string), so a cadence in steps could leave seconds between reads.
  if (++charges_ % 16 == 0 || steps > 4096) {
    int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    if (now > deadline_ns_) return out_of_range("template rendering took longer than the time limit");
  }
  return Status();
}

Status Interpreter::charge_bytes(uint64_t bytes) {
  bytes_built_ += bytes;
  if (bytes_built_ > opts_.limits.max_bytes_built) return out_of_range("template exceeded its memory-churn budget");
  return charge(bytes / 4096);
}

StatusOr<std::string> Interpreter::str(const Value& v) {
  if (v.is_string()) return v.as_string();  // within the limit since it was built
  return printed(jinja::to_str(v, opts_.limits.max_string_bytes));
}

StatusOr<std::string> Interpreter::repr(const Value& v) {
  return printed(jinja::repr(v, opts_.limits.max_string_bytes));
}

StatusOr<std::string> Interpreter::printed(std::string text) {
  KVASIR_RETURN_IF_ERROR(check_size(text.size()));  // a text cut short at the cap is over it
  KVASIR_RETURN_IF_ERROR(charge_bytes(text.size()));
  return text;
}

StatusOr<ValueList> Interpreter::iterate(const Value& v) {
  uint64_t items = 0;
  switch (v.kind()) {
    case Kind::kString: items = v.as_string().size(); break;  // bytes: an upper bound on its chars
    case Kind::kList: case Kind::kTuple: items = v.as_list().size(); break;
    case Kind::kDict: items = v.as_dict().size(); break;
    case Kind::kIterator: items = v.as_iterator().items.size() - v.as_iterator().pos; break;
    default: break;
  }
  KVASIR_RETURN_IF_ERROR(charge(items));
  return jinja::iterate(v);
}

Status Interpreter::charge_deep(const Value& v, uint64_t times) {
  times = std::max<uint64_t>(times, 1);
  const uint64_t cap = steps_left() / times + 1;  // a cost past this is over budget
  uint64_t cost = 0;
  std::vector<const Value*> todo{&v};
  auto visit = [&](const Value& x) {
    ++cost;
    todo.push_back(&x);
  };
  while (!todo.empty() && cost <= cap) {
    const Value& x = *todo.back();
    todo.pop_back();
    ++cost;
    switch (x.kind()) {
      case Kind::kString: cost += x.as_string().size() / 64; break;
      case Kind::kList: case Kind::kTuple:
        for (size_t i = 0; i < x.as_list().size() && cost <= cap; ++i) visit(x.as_list()[i]);
        break;
      case Kind::kDict:
        for (size_t i = 0; i < x.as_dict().entries.size() && cost <= cap; ++i) {
          visit(x.as_dict().entries[i].first);
          visit(x.as_dict().entries[i].second);
        }
        break;
      case Kind::kNamespace:
        for (size_t i = 0; i < x.as_namespace().attrs.size() && cost <= cap; ++i) visit(x.as_namespace().attrs[i].second);
        break;
      case Kind::kIterator:
        for (size_t i = x.as_iterator().pos; i < x.as_iterator().items.size() && cost <= cap; ++i) {
          visit(x.as_iterator().items[i]);
        }
        break;
      default: break;
    }
  }
  return charge(cost > cap ? UINT64_MAX / 2 : cost * times);
}

Status Interpreter::charge_walk(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return charge(v.as_string().size() / 64);
    case Kind::kList: case Kind::kTuple: return charge(v.as_list().size());
    case Kind::kDict: return charge(v.as_dict().size());
    case Kind::kIterator: return charge(v.as_iterator().items.size());
    default: return Status();
  }
}

Status Interpreter::check_size(uint64_t n) const {
  if (n > opts_.limits.max_string_bytes) return out_of_range("template built a string or list larger than the limit");
  return Status();
}

StatusOr<std::string> Interpreter::render(const Program& program, const Json& context) {
  if (!context.is_object()) return invalid_argument("template context must be a JSON object");
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  for (const auto& [k, v] : context.as_object()) {
    KVASIR_ASSIGN_OR_RETURN(Value x, from_json(v, opts_.limits.max_value_depth));
    globals->set(k, std::move(x));
  }
  scope_ = std::make_shared<Scope>();
  scope_->parent = std::move(globals);
  std::string out;
  out_ = &out;
  Status s = exec_body(program.body);
  out_ = nullptr;
  scope_.reset();
  captured_.clear();
  if (!s.ok()) {
    std::string msg = s.message();
    if (error_line_ > 0) msg = "line " + std::to_string(error_line_) + ": " + msg;
    return Status(s.code(), std::move(msg));
  }
  return out;
}

Status Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > opts_.limits.max_output_bytes) {
    return out_of_range("rendered output is larger than the limit");
  }
  KVASIR_RETURN_IF_ERROR(charge_bytes(text.size()));
  out_->append(text);
  return Status();
}

Status Interpreter::emit_value(const Value& v) {
  KVASIR_ASSIGN_OR_RETURN(std::string text, str(v));
  return emit(text);
}

Status Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    KVASIR_RETURN_IF_ERROR(exec(*s));
    if (ctrl_ != Ctrl::kNone) break;
  }
  return Status();
}

StatusOr<std::string> Interpreter::capture(const Body& body, std::shared_ptr<Scope> scope) {
  std::string buf;
  Swap<std::string*> o(out_, &buf);
  Swap<std::shared_ptr<Scope>> sc(scope_, std::move(scope));
  KVASIR_RETURN_IF_ERROR(exec_body(body));
  return buf;
}

static std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Status Interpreter::exec(const Stmt& s) {
  RecursionGuard g(*this);
  if (g.exceeded()) return annotate(out_of_range("template recursion too deep"), s.line);
  KVASIR_RETURN_IF_ERROR(annotate(charge(1), s.line));
  switch (s.kind) {
    case StmtKind::kData: return annotate(emit(s.text), s.line);
    case StmtKind::kPrint: {
      KVASIR_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      return annotate(emit_value(v), s.line);
    }
    case StmtKind::kIf: {
      KVASIR_ASSIGN_OR_RETURN(Value t, eval(*s.test));
      return exec_body(truthy(t) ? s.body : s.else_body);
    }
    case StmtKind::kFor: return annotate(exec_for(s), s.line);
    case StmtKind::kAssign: {
      KVASIR_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      return annotate(assign(*s.target, std::move(v)), s.line);
    }
    case StmtKind::kAssignBlock: case StmtKind::kFilterBlock: {
      // The body is a frame of its own: names it sets (macros too) do not leak out.
      KVASIR_ASSIGN_OR_RETURN(std::string text, capture(s.body, child_of(scope_)));
      Value v = Value::string(std::move(text));
      if (s.test) {
        Swap<Value> in(block_input_, std::move(v));
        KVASIR_ASSIGN_OR_RETURN(v, eval(*s.test));
      }
      if (s.kind == StmtKind::kFilterBlock) return annotate(emit_value(v), s.line);
      return annotate(assign(*s.target, std::move(v)), s.line);
    }
    case StmtKind::kMacro:
      scope_->set(s.text, make_macro(s, s.text));
      return Status();
    case StmtKind::kCallBlock: {
      const Expr& call_expr = *s.expr;
      KVASIR_ASSIGN_OR_RETURN(Value callee, eval(*call_expr.a));
      CallArgs args;
      KVASIR_RETURN_IF_ERROR(annotate(eval_args(call_expr, &args), s.line));
      args.kw.emplace_back("caller", make_macro(s, "caller"));
      auto r = call(callee, std::move(args));
      if (!r.ok()) return annotate(r.status(), s.line);
      return annotate(emit_value(*r), s.line);
    }
    case StmtKind::kWith: {
      auto inner = child_of(scope_);
      for (size_t i = 0; i < s.targets.size(); ++i) {
        KVASIR_ASSIGN_OR_RETURN(Value v, eval(*s.values[i]));
        KVASIR_RETURN_IF_ERROR(annotate(unpack(*s.targets[i], v, *inner), s.line));
      }
      Swap<std::shared_ptr<Scope>> sc(scope_, std::move(inner));
      return exec_body(s.body);
    }
    case StmtKind::kScope: {
      Swap<std::shared_ptr<Scope>> sc(scope_, child_of(scope_));
      return exec_body(s.body);
    }
    case StmtKind::kBreak: ctrl_ = Ctrl::kBreak; return Status();
    case StmtKind::kContinue: ctrl_ = Ctrl::kContinue; return Status();
  }
  return internal_error("unexpected statement node");
}

Status Interpreter::exec_for(const Stmt& s) {
  KVASIR_ASSIGN_OR_RETURN(Value seq, eval(*s.expr));
  KVASIR_ASSIGN_OR_RETURN(ValueList items, iterate(seq));
  std::shared_ptr<Scope> outer = scope_;
  auto count_iteration = [&]() -> Status {
    if (++iterations_ > opts_.limits.max_loop_iterations) {
      return out_of_range("template exceeded the loop iteration limit");
    }
    return Status();
  };
  if (s.test) {
    ValueList kept;
    for (Value& item : items) {
      KVASIR_RETURN_IF_ERROR(count_iteration());
      auto sc = child_of(outer);
      KVASIR_RETURN_IF_ERROR(unpack(*s.target, item, *sc));
      Swap<std::shared_ptr<Scope>> swap(scope_, std::move(sc));
      KVASIR_ASSIGN_OR_RETURN(Value keep, eval(*s.test));
      if (truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Swap<std::shared_ptr<Scope>> swap(scope_, child_of(outer));
    return exec_body(s.else_body);
  }
  auto loop = std::make_shared<LoopData>();
  loop->items = std::make_shared<const ValueList>(std::move(items));
  Value loop_value = Value::loop(loop);
  for (size_t i = 0; i < loop->items->size(); ++i) {
    KVASIR_RETURN_IF_ERROR(count_iteration());
    loop->index0 = i;
    auto sc = child_of(outer);
    KVASIR_RETURN_IF_ERROR(unpack(*s.target, (*loop->items)[i], *sc));
    sc->set("loop", loop_value);
    Swap<std::shared_ptr<Scope>> swap(scope_, std::move(sc));
    KVASIR_RETURN_IF_ERROR(exec_body(s.body));
    Ctrl c = ctrl_;
    ctrl_ = Ctrl::kNone;
    if (c == Ctrl::kBreak) break;
  }
  return Status();
}

Status Interpreter::unpack(const Expr& target, const Value& v, Scope& into) {
  if (target.kind == ExprKind::kName) {
    into.set(target.name, v);
    return Status();
  }
  if (v.is_undefined()) return invalid_argument(v.as_string());
  KVASIR_ASSIGN_OR_RETURN(ValueList parts, iterate(v));
  size_t n = target.items.size();
  if (parts.size() < n) {
    return invalid_argument("not enough values to unpack (expected " + std::to_string(n) + ", got " +
                            std::to_string(parts.size()) + ")");
  }
  if (parts.size() > n) return invalid_argument("too many values to unpack (expected " + std::to_string(n) + ")");
  for (size_t i = 0; i < n; ++i) into.set(target.items[i]->name, std::move(parts[i]));
  return Status();
}

Status Interpreter::assign(const Expr& target, Value v) {
  if (target.kind != ExprKind::kNSRef) return unpack(target, v, *scope_);
  KVASIR_ASSIGN_OR_RETURN(Value ns, lookup(target.name));
  if (ns.kind() != Kind::kNamespace) return invalid_argument("cannot assign attribute on non-namespace object");
  if (!target.attr.empty() && target.attr[0] == '_') {
    return invalid_argument("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                            target.attr + "'. Please rename the attribute.");
  }
  // Sandbox: a namespace reachable from its own attribute would be a reference cycle.
  if (v.holds_namespace()) return invalid_argument("cannot store a namespace or macro inside a namespace");
  ns.as_namespace().set(target.attr, std::move(v));
  return Status();
}

Value Interpreter::make_macro(const Stmt& def, std::string name) {
  captured_.push_back(scope_);
  return Value::callable(std::make_shared<Macro>(&def, scope_, std::move(name)));
}

StatusOr<Value> Interpreter::call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                                        const std::string& name, CallArgs args) {
  if (call_depth_ >= opts_.limits.max_call_depth) return out_of_range("macro calls nested too deeply");
  const size_t np = def.params.size();
  if (args.pos.size() > np && !def.uses_varargs) {
    return type_error("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
  }
  auto sc = child_of(closure);
  std::vector<bool> bound(np, false);
  for (size_t i = 0; i < np && i < args.pos.size(); ++i) {
    sc->set(def.params[i], std::move(args.pos[i]));
    bound[i] = true;
  }
  DictData extra_kw;
  Value caller;
  bool has_caller = false;
  for (auto& [k, v] : args.kw) {
    size_t j = 0;
    while (j < np && def.params[j] != k) ++j;
    if (j < np) {
      if (bound[j]) return type_error("macro '" + name + "' got multiple values for argument '" + k + "'");
      sc->set(k, std::move(v));
      bound[j] = true;
    } else if (k == "caller") {
      caller = std::move(v);
      has_caller = true;
    } else if (def.uses_kwargs) {
      KVASIR_RETURN_IF_ERROR(extra_kw.insert(Value::string(k), std::move(v)));
    } else {
      return type_error("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  ++call_depth_;
  Swap<std::shared_ptr<Scope>> swap(scope_, sc);
  const size_t first_default = np - def.defaults.size();
  for (size_t j = 0; j < np; ++j) {
    if (bound[j]) continue;
    if (j >= first_default) {
      auto v = eval(*def.defaults[j - first_default]);
      if (!v.ok()) {
        --call_depth_;
        return v.status();
      }
      sc->set(def.params[j], std::move(*v));
    } else {
      sc->set(def.params[j], Value::undefined("parameter '" + def.params[j] + "' was not provided"));
    }
  }
  if (def.uses_varargs) {
    ValueList rest;
    for (size_t i = np; i < args.pos.size(); ++i) rest.push_back(std::move(args.pos[i]));
    sc->set("varargs", Value::tuple(std::move(rest)));
  }
  if (def.uses_kwargs) sc->set("kwargs", Value::dict(std::move(extra_kw)));
  if (has_caller) sc->set("caller", std::move(caller));
  std::string buf;
  Status st;
  {
    Swap<std::string*> o(out_, &buf);
    st = exec_body(def.body);
  }
  --call_depth_;
  ctrl_ = Ctrl::kNone;
  KVASIR_RETURN_IF_ERROR(st);
  return Value::string(std::move(buf));
}

StatusOr<Value> Interpreter::filter(std::string_view name, Value input, CallArgs args) {
  return apply_filter(*this, name, std::move(input), std::move(args));
}

StatusOr<bool> Interpreter::test(std::string_view name, const Value& v, CallArgs args) {
  return apply_test(*this, name, v, std::move(args));
}

}  // namespace kvasir::jinja
