// Interpreter: evaluates a parsed Program against a context, with jinja2's scoping (a loop
// iteration, macro call or `with` opens a scope; `if` does not), Undefined semantics, HF's
// sandbox rules, and every limit of JinjaLimits enforced as it runs. Internal to src/chat:
// filters (jinja_filters.cpp), tests (jinja_istests.cpp) and methods (jinja_methods.cpp) call
// back into it. One Interpreter renders once; it is not shared between threads.
#pragma once

#include <ctime>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_template.h"
#include "chat/jinja_value.h"

namespace kvasir::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  Value* find_local(std::string_view name) {
    for (auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    if (Value* slot = find_local(name)) {
      *slot = std::move(v);
    } else {
      vars.emplace_back(std::string(name), std::move(v));
    }
  }
};

class Interpreter;

// Counts evaluator recursion (expressions, statements, calls) against max_recursion_depth.
class RecursionGuard {
 public:
  explicit RecursionGuard(Interpreter& in);
  ~RecursionGuard();
  bool exceeded() const;

 private:
  Interpreter& in_;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& opts);
  StatusOr<std::string> render(const Program& program, const Json& context);

  const JinjaLimits& limits() const { return opts_.limits; }
  const std::tm& now() const { return now_; }
  // Spends evaluation steps / bytes built from the render's budgets.
  Status charge(uint64_t steps);
  Status charge_bytes(uint64_t bytes);
  // Steps still unspent: bounds work whose size is only known while doing it (str.split).
  uint64_t steps_left() const { return steps_ < opts_.limits.max_steps ? opts_.limits.max_steps - steps_ : 0; }
  // Python str(v) / repr(v) as the template sees them: refused past max_string_bytes, charged.
  StatusOr<std::string> str(const Value& v);
  StatusOr<std::string> repr(const Value& v);
  // Python iter(v) (see jinja::iterate), charged one step per item before the items are built.
  StatusOr<ValueList> iterate(const Value& v);
  // Charges what walking `v` costs (its elements, or its bytes for strings).
  Status charge_walk(const Value& v);
  // Charges `times` walks of all of `v` (every nested element, string bytes / 64), for operations
  // that compare, sort or serialise whole values. A shared value counts each time it is reached,
  // since that is what the walk costs; counting stops as soon as the budget is exceeded.
  Status charge_deep(const Value& v, uint64_t times = 1);
  // Refuses strings/lists larger than max_string_bytes (call before building them).
  Status check_size(uint64_t n) const;

  StatusOr<Value> getattr(const Value& obj, const std::string& name);
  StatusOr<Value> getitem(const Value& obj, const Value& key);
  StatusOr<Value> call(const Value& callee, CallArgs args);
  StatusOr<Value> filter(std::string_view name, Value input, CallArgs args);
  StatusOr<bool> test(std::string_view name, const Value& v, CallArgs args);

  // Invoked by macro values.
  StatusOr<Value> call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure, const std::string& name,
                             CallArgs args);

 private:
  friend class RecursionGuard;
  StatusOr<Value> eval(const Expr& e);
  StatusOr<Value> eval_inner(const Expr& e);
  StatusOr<Value> eval_compare(const Expr& e);
  StatusOr<Value> eval_call(const Expr& e);
  Status eval_args(const Expr& e, CallArgs* args);
  StatusOr<Value> lookup(const std::string& name) const;
  StatusOr<Value> slice(const Value& obj, const Expr& s);

  Status exec_body(const Body& body);
  Status exec(const Stmt& s);
  Status exec_for(const Stmt& s);
  Status assign(const Expr& target, Value v);
  Status unpack(const Expr& target, const Value& v, Scope& into);
  Status emit(std::string_view text);
  Status emit_value(const Value& v);  // emit(str(v))
  StatusOr<std::string> printed(std::string text);  // str/repr's text: size-checked, charged
  StatusOr<std::string> capture(const Body& body, std::shared_ptr<Scope> scope);
  Value make_macro(const Stmt& def, std::string name);
  Status annotate(Status s, int line);

  RenderOptions opts_;
  std::tm now_{};
  std::shared_ptr<Scope> scope_;                  // current scope
  std::vector<std::shared_ptr<Scope>> captured_;  // scopes that macros close over, alive to the end
  std::string* out_ = nullptr;                    // current output buffer
  Value block_input_;                             // input of a filter chain in set/filter blocks
  enum class Ctrl { kNone, kBreak, kContinue } ctrl_ = Ctrl::kNone;
  uint64_t steps_ = 0;
  uint64_t charges_ = 0;  // charge() calls, for the deadline check's cadence
  uint64_t bytes_built_ = 0;
  uint64_t iterations_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  int error_line_ = 0;
  int64_t deadline_ns_ = 0;
};

// Call-site helpers shared by filters, tests and methods: binds positional/keyword arguments to
// parameter names as Python does; unknown or duplicate names are a TypeError.
Status bind_args(const char* fn, const CallArgs& args, std::initializer_list<const char*> names,
                 std::vector<const Value*>* out);

StatusOr<Value> call_method(Interpreter& in, const Value& self, const std::string& name, CallArgs args);
// What kind of attribute `name` is on a str/list/dict/...: 0 none, 1 a safe method, 2 a method the
// immutable sandbox forbids (list.append, dict.update, ...).
int method_kind(const Value& self, std::string_view name);
Value make_bound_method(const Value& self, const std::string& name);
Value unsafe_undefined(const Value& obj, std::string_view attr);
// Globals every render sees: range, dict, namespace, raise_exception, strftime_now.
void add_globals(Scope& scope);
StatusOr<std::string> str_format(Interpreter& in, const std::string& fmt, const CallArgs& args);
StatusOr<std::string> percent_format(Interpreter& in, const std::string& fmt, const Value& args);
StatusOr<Value> apply_filter(Interpreter& in, std::string_view name, Value input, CallArgs args);
// The sequence filters (jinja_filters_seq.cpp); *handled is false for other names.
StatusOr<Value> apply_seq_filter(Interpreter& in, std::string_view name, const Value& v, const CallArgs& args,
                                 bool* handled);
StatusOr<bool> apply_test(Interpreter& in, std::string_view name, const Value& v, CallArgs args);
StatusOr<Value> binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b);

}  // namespace kvasir::jinja
