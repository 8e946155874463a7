// Value: what a Jinja expression evaluates to, modelled on the Python objects jinja2 sees when HF
// renders a chat template (None, bool, int, float, str, list, tuple, dict, generators, namespaces,
// macros, jinja's Undefined). Containers are shared and immutable once built (HF's sandbox forbids
// mutating them); only a namespace's attributes change. Python's str()/repr()/==/< rules live here.
// Must not know about the interpreter's scopes or statements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::jinja {

class Interpreter;
class Value;
using ValueList = std::vector<Value>;

enum class Kind : uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kIterator, kNamespace,
  kCallable, kLoop,
};

struct CallArgs {
  ValueList pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Callable;
struct DictData;
struct IteratorData;
struct NamespaceData;
struct LoopData;

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  // markupsafe.Markup: a str that `|safe`/`|escape` made; `+` and `%` escape plain operands.
  static Value markup(std::string s);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(DictData d);
  static Value iterator(ValueList items, std::string repr);
  static Value ns(NamespaceData n);
  static Value callable(std::shared_ptr<Callable> c);
  static Value loop(std::shared_ptr<LoopData> l);  // after l->items is set

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return markup_; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(as_int()); }
  const std::string& as_string() const;  // also the message of an undefined
  const ValueList& as_list() const;      // list or tuple
  const DictData& as_dict() const;
  IteratorData& as_iterator() const;
  NamespaceData& as_namespace() const;
  Callable& as_callable() const;
  LoopData& as_loop() const;

  // Nesting depth of containers (scalars are 0); bounded by the interpreter so that printing,
  // comparing and destroying values never recurses deeply.
  int depth() const { return depth_; }
  // True when a namespace is reachable from this value: storing such a value in a namespace could
  // make a reference cycle, which the interpreter refuses.
  bool holds_namespace() const { return has_ns_; }

 private:
  void set_children(const ValueList& items);
  Kind kind_ = Kind::kUndefined;
  bool has_ns_ = false;
  bool markup_ = false;
  uint16_t depth_ = 0;
  union {
    bool b_;
    int64_t i_ = 0;
    double d_;
  };
  std::shared_ptr<void> p_;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<std::string, size_t> str_index;  // string keys -> entry

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Python dict assignment: replaces in place when the key exists, else appends.
  Status insert(Value key, Value value);
  size_t size() const { return entries.size(); }
};

struct IteratorData {
  ValueList items;
  size_t pos = 0;
  std::string repr;
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value v);
};

// One per loop, advanced in place each iteration (as jinja's LoopContext).
struct LoopData {
  std::shared_ptr<const ValueList> items;
  size_t index0 = 0;
  ValueList last_changed;  // loop.changed() state
  bool changed_called = false;
};

class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string repr() const = 0;
  virtual StatusOr<Value> call(Interpreter& in, CallArgs args) = 0;
};

bool truthy(const Value& v);
const char* type_name(const Value& v);  // Python's type(v).__name__
std::string object_type_repr(const Value& v);  // jinja's "dict object", "None"
// Python str() (undefined -> "") and repr(). A container can print far larger than it is ([s] * n
// shares one s), so both stop writing soon after max_bytes: a result longer than max_bytes is cut
// short, and callers treat it as over their limit (Interpreter::str/repr) or as a message prefix.
std::string to_str(const Value& v, size_t max_bytes);
std::string repr(const Value& v, size_t max_bytes);
// repr() for an error message: at most a few hundred bytes, a longer one cut and ended with "...".
std::string message_repr(const Value& v);
std::string html_escape(std::string_view s);  // markupsafe.escape
bool equal(const Value& a, const Value& b);  // Python ==
// Python a < b (and friends through the sign): -1, 0, 1, or a TypeError naming `op`.
StatusOr<int> compare(const Value& a, const Value& b, const char* op);
bool hashable(const Value& v);
// Python iter(): lists, tuples, str (chars), dict (keys), generators (consumed), undefined (empty).
StatusOr<ValueList> iterate(const Value& v);
StatusOr<int64_t> length(const Value& v);  // Python len()

StatusOr<Value> from_json(const Json& j, int max_depth);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// Python json.dumps over values; TypeError/ValueError as Status.
StatusOr<std::string> dump_json(const Value& v, const JsonDumpOptions& opts);

Status type_error(std::string msg);

}  // namespace kvasir::jinja
