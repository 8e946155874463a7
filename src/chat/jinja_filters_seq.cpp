// Jinja's filters over sequences and mappings (first, last, join, sort, unique, dictsort, map,
// select/reject(attr), min/max, sum, batch, items, list, reverse). Those that are generators in
// jinja2 return one-shot iterators here too.
#include <algorithm>
#include <cstdlib>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {
namespace {

using Args = std::vector<const Value*>;

bool is_true(const Value* v, bool def) { return v ? truthy(*v) : def; }

// jinja's make_attrgetter: "a.b.0" looked up with getitem (then getattr) one part at a time.
StatusOr<Value> get_path(Interpreter& in, Value item, const Value& attr, const Value* dflt) {
  std::vector<Value> parts;
  if (attr.is_string()) {
    std::vector<std::string> names = py::split(attr.as_string(), std::string("."), -1, false, in.steps_left());
    KVASIR_RETURN_IF_ERROR(in.charge(names.size()));
    for (auto& p : names) {
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits && p.size() < 18) {
        parts.push_back(Value::integer(std::strtoll(p.c_str(), nullptr, 10)));
      } else {
        parts.push_back(Value::string(p));
      }
    }
  } else if (!attr.is_none()) {
    parts.push_back(attr);
  }
  for (const Value& p : parts) {
    KVASIR_ASSIGN_OR_RETURN(item, in.getitem(item, p));
    if (dflt && !dflt->is_none() && item.is_undefined()) item = *dflt;
  }
  return item;
}

Value lowered(const Value& v) { return v.is_string() ? Value::string(py::lower(v.as_string())) : v; }

Value generator(ValueList items, const char* fn) {
  return Value::iterator(std::move(items), std::string("<generator object ") + fn + ">");
}

// Python sorted(): stable, TypeError on incomparable keys.
Status sort_by_keys(ValueList& items, const ValueList& keys, bool reverse) {
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  Status err;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (!err.ok()) return false;
    // jinja's sort keys are 1-element lists: equal keys never reach `<` (so Undefined keys tie).
    const Value& x = reverse ? keys[b] : keys[a];
    const Value& y = reverse ? keys[a] : keys[b];
    if (equal(x, y)) return false;
    auto c = compare(x, y, "<");
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return *c < 0;
  });
  KVASIR_RETURN_IF_ERROR(err);
  ValueList out;
  out.reserve(items.size());
  for (size_t i : idx) out.push_back(std::move(items[i]));
  items = std::move(out);
  return Status();
}

StatusOr<Value> select_reject(Interpreter& in, const Value& value, const CallArgs& args, bool select, bool attr,
                              const char* fn) {
  if (!truthy(value) && value.kind() != Kind::kIterator) return generator({}, fn);
  size_t off = attr ? 1 : 0;
  if (attr && args.pos.empty()) return invalid_argument("Missing parameter for attribute name");
  KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(value));
  ValueList out;
  for (const Value& item : items) {
    Value x = item;
    if (attr) {
      KVASIR_ASSIGN_OR_RETURN(x, get_path(in, item, args.pos[0], nullptr));
    }
    bool ok;
    if (args.pos.size() > off) {
      if (!args.pos[off].is_string()) return type_error("test name must be a string");
      CallArgs targs;
      targs.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.pos.end());
      targs.kw = args.kw;
      KVASIR_ASSIGN_OR_RETURN(ok, in.test(args.pos[off].as_string(), x, std::move(targs)));
    } else {
      ok = truthy(x);
    }
    if (ok == select) out.push_back(item);
  }
  return generator(std::move(out), fn);
}

StatusOr<Value> minmax(Interpreter& in, const Value& v, const CallArgs& args, bool want_max) {
  Args a;
  KVASIR_RETURN_IF_ERROR(bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, &a));
  KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = items[i];
    if (a[1]) {
      KVASIR_ASSIGN_OR_RETURN(k, get_path(in, items[i], *a[1], nullptr));
    }
    KVASIR_RETURN_IF_ERROR(in.charge_deep(k, 2));  // lowering it and one comparison
    if (!is_true(a[0], false)) k = lowered(k);
    if (i == 0) {
      best_key = k;
      continue;
    }
    KVASIR_ASSIGN_OR_RETURN(int c, compare(k, best_key, want_max ? ">" : "<"));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

}  // namespace

StatusOr<Value> apply_seq_filter(Interpreter& in, std::string_view name, const Value& v, const CallArgs& args,
                                 bool* handled) {
  Args a;
  const std::string fn(name);
  auto bind = [&](std::initializer_list<const char*> names) { return bind_args(fn.c_str(), args, names, &a); };
  *handled = true;
  if (name == "first") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    if (v.kind() == Kind::kIterator) {
      IteratorData& it = v.as_iterator();
      if (it.pos < it.items.size()) return it.items[it.pos++];
      return Value::undefined("No first item, sequence was empty.");
    }
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    if (v.is_undefined()) return Value::undefined("No last item, sequence was empty.");
    if (!v.is_string() && !v.is_sequence() && v.kind() != Kind::kDict) {
      return type_error(std::string("'") + type_name(v) + "' object is not reversible");
    }
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "join") {
    KVASIR_RETURN_IF_ERROR(bind({"d", "attribute"}));
    std::string sep;
    if (a[0]) {
      KVASIR_ASSIGN_OR_RETURN(sep, in.str(*a[0]));
    }
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value x = items[i];
      if (a[1] && !a[1]->is_none()) {
        KVASIR_ASSIGN_OR_RETURN(x, get_path(in, x, *a[1], nullptr));
      }
      KVASIR_ASSIGN_OR_RETURN(std::string piece, in.str(x));
      if (i) out += sep;
      out += piece;
      KVASIR_RETURN_IF_ERROR(in.check_size(out.size()));
    }
    KVASIR_RETURN_IF_ERROR(in.charge_bytes(out.size()));
    return Value::string(std::move(out));
  }
  if (name == "list") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    return Value::list(std::move(items));
  }
  if (name == "items") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    if (v.is_undefined()) return generator({}, "do_items");
    if (v.kind() != Kind::kDict) return type_error("Can only get item pairs from a mapping.");
    ValueList out;
    for (const auto& [k, x] : v.as_dict().entries) out.push_back(Value::tuple({k, x}));
    return generator(std::move(out), "do_items");
  }
  if (name == "reverse") {
    KVASIR_RETURN_IF_ERROR(bind({}));
    if (v.is_string()) {
      std::vector<uint32_t> cps = py::code_points(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) py::append_cp(out, *it);
      return Value::string(std::move(out));
    }
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    std::reverse(items.begin(), items.end());
    if (v.is_sequence() || v.kind() == Kind::kDict) {
      return Value::iterator(std::move(items), std::string("<") + type_name(v) + "_reverseiterator object>");
    }
    return Value::list(std::move(items));
  }
  if (name == "sort" || name == "unique" || name == "dictsort") {
    bool is_dictsort = name == "dictsort";
    if (is_dictsort) {
      KVASIR_RETURN_IF_ERROR(bind({"case_sensitive", "by", "reverse"}));
    } else if (name == "sort") {
      KVASIR_RETURN_IF_ERROR(bind({"reverse", "case_sensitive", "attribute"}));
    } else {
      KVASIR_RETURN_IF_ERROR(bind({"case_sensitive", "attribute"}));
    }
    const Value* attribute = is_dictsort ? nullptr : (name == "sort" ? a[2] : a[1]);
    bool case_sensitive = is_true(name == "sort" ? a[1] : a[0], false);
    ValueList items;
    if (is_dictsort) {
      if (v.kind() != Kind::kDict) {
        return v.is_undefined() ? StatusOr<Value>(invalid_argument(v.as_string()))
                                : type_error(std::string("'") + type_name(v) + "' object has no attribute 'items'");
      }
      for (const auto& [k, x] : v.as_dict().entries) items.push_back(Value::tuple({k, x}));
    } else {
      KVASIR_ASSIGN_OR_RETURN(items, in.iterate(v));
    }
    KVASIR_RETURN_IF_ERROR(in.charge(items.size() * 4));
    size_t pos = 0;
    if (is_dictsort && a[1]) {
      KVASIR_ASSIGN_OR_RETURN(std::string by, in.str(*a[1]));
      if (by != "key" && by != "value") return invalid_argument("You can only sort by either \"key\" or \"value\"");
      pos = by == "value" ? 1 : 0;
    }
    // A sort compares each key about 2 log2(n) times (introsort's depth bound); the key is lowered
    // once first. Charged per key, before the work, since one key can be a whole megabyte.
    uint64_t rounds = 3;
    for (size_t n = items.size(); n > 1; n >>= 1) rounds += 2;
    ValueList keys;
    for (const Value& item : items) {
      Value k = is_dictsort ? item.as_list()[pos] : item;
      if (attribute && !attribute->is_none()) {
        KVASIR_ASSIGN_OR_RETURN(k, get_path(in, item, *attribute, nullptr));
      }
      KVASIR_RETURN_IF_ERROR(in.charge_deep(k, name == "unique" ? 2 : rounds));
      keys.push_back(case_sensitive ? k : lowered(k));
    }
    if (name == "unique") {
      ValueList out, seen;
      KVASIR_RETURN_IF_ERROR(in.charge(items.size() * items.size() / 16));
      for (size_t i = 0; i < items.size(); ++i) {
        if (!hashable(keys[i])) return type_error(std::string("unhashable type: '") + type_name(keys[i]) + "'");
        KVASIR_RETURN_IF_ERROR(in.charge_deep(keys[i], seen.size()));  // compared with each kept key
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, keys[i]); })) continue;
        seen.push_back(keys[i]);
        out.push_back(items[i]);
      }
      return generator(std::move(out), "sync_do_unique");
    }
    KVASIR_RETURN_IF_ERROR(sort_by_keys(items, keys, is_true(name == "sort" ? a[0] : a[2], false)));
    return Value::list(std::move(items));
  }
  if (name == "map") {
    ValueList items;
    if (!truthy(v) && v.kind() != Kind::kIterator) return generator({}, "sync_do_map");  // jinja: `if value:`
    if (args.pos.empty() && !args.kw.empty() && args.kw[0].first == "attribute") {
      KVASIR_RETURN_IF_ERROR(bind({"attribute", "default"}));
      KVASIR_ASSIGN_OR_RETURN(ValueList src, in.iterate(v));
      for (const Value& x : src) {
        KVASIR_ASSIGN_OR_RETURN(Value y, get_path(in, x, *a[0], a[1]));
        items.push_back(std::move(y));
      }
      return generator(std::move(items), "sync_do_map");
    }
    if (args.pos.empty()) return invalid_argument("map requires a filter argument");
    if (!args.pos[0].is_string()) return type_error("filter name must be a string");
    std::string fname = args.pos[0].as_string();
    if (!filter_exists(fname)) return invalid_argument("No filter named '" + fname + "'.");
    KVASIR_ASSIGN_OR_RETURN(ValueList src, in.iterate(v));
    for (const Value& x : src) {
      CallArgs fargs;
      fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
      fargs.kw = args.kw;
      KVASIR_ASSIGN_OR_RETURN(Value y, apply_filter(in, fname, x, std::move(fargs)));
      items.push_back(std::move(y));
    }
    return generator(std::move(items), "sync_do_map");
  }
  if (name == "select") return select_reject(in, v, args, true, false, "sync_do_select");
  if (name == "reject") return select_reject(in, v, args, false, false, "sync_do_reject");
  if (name == "selectattr") return select_reject(in, v, args, true, true, "sync_do_selectattr");
  if (name == "rejectattr") return select_reject(in, v, args, false, true, "sync_do_rejectattr");
  if (name == "min" || name == "max") return minmax(in, v, args, name == "max");
  if (name == "sum") {
    KVASIR_RETURN_IF_ERROR(bind({"attribute", "start"}));
    Value acc = a[1] ? *a[1] : Value::integer(0);
    if (acc.is_string()) return type_error("sum() can't sum strings [use ''.join(seq) instead]");
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    for (const Value& x : items) {
      Value y = x;
      if (a[0] && !a[0]->is_none()) {
        KVASIR_ASSIGN_OR_RETURN(y, get_path(in, x, *a[0], nullptr));
      }
      KVASIR_ASSIGN_OR_RETURN(acc, binary_op(in, BinOp::kAdd, acc, y));
    }
    return acc;
  }
  if (name == "batch") {
    KVASIR_RETURN_IF_ERROR(bind({"linecount", "fill_with"}));
    if (!a[0] || !a[0]->is_int() || a[0]->as_int() <= 0) return invalid_argument("batch: linecount must be a positive int");
    size_t n = static_cast<size_t>(a[0]->as_int());
    KVASIR_ASSIGN_OR_RETURN(ValueList items, in.iterate(v));
    ValueList out, cur;
    for (Value& x : items) {
      if (cur.size() == n) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
      cur.push_back(std::move(x));
    }
    if (!cur.empty()) {
      if (a[1] && !a[1]->is_none()) {
        KVASIR_RETURN_IF_ERROR(in.check_size(n));
        while (cur.size() < n) cur.push_back(*a[1]);
      }
      out.push_back(Value::list(std::move(cur)));
    }
    return generator(std::move(out), "do_batch");
  }
  *handled = false;
  return Value();
}

}  // namespace kvasir::jinja
