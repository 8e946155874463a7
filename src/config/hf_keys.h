// HfKeys: typed, error-naming access to the keys of one HF config.json object (null counts as
// absent, integers are checked to be integral). Shared by the generic HF reader and the model
// families that read keys of their own. Must not know any family.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir {

// Typed access to one JSON object; null counts as absent (HF writes "rope_scaling": null).
class HfKeys {
 public:
  HfKeys(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  const Json* find(std::string_view key) const {
    const Json* v = j_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  Status type_error(std::string_view key, const char* want) const {
    return invalid_argument(where_ + ": '" + std::string(key) + "' must be " + want);
  }
  StatusOr<std::optional<int64_t>> opt_int(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::optional<int64_t>();
    auto i = as_integer(*v);
    if (!i) return type_error(key, "an integer");
    return i;
  }
  StatusOr<int64_t> int_or(std::string_view key, int64_t def) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    return v.value_or(def);
  }
  StatusOr<int64_t> req_int(std::string_view key) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    if (!v)
      return invalid_argument(where_ + ": required key '" + std::string(key) + "' is missing");
    return *v;
  }
  // A size or count: absent => `def`; present, it must be an integer >= 1 (HF writes no 0 or
  // negative sizes, and one would only fail later, far from the key that caused it).
  StatusOr<int64_t> positive_int_or(std::string_view key, int64_t def) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    if (v && *v < 1) return out_of_range(key, std::to_string(*v), "a positive integer");
    return v.value_or(def);
  }
  StatusOr<int64_t> req_positive_int(std::string_view key) const {
    KVASIR_ASSIGN_OR_RETURN(int64_t v, req_int(key));
    if (v < 1) return out_of_range(key, std::to_string(v), "a positive integer");
    return v;
  }
  static std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
  }
  Status out_of_range(std::string_view key, const std::string& got, const std::string& want) const {
    return invalid_argument(where_ + ": '" + std::string(key) + "' is " + got + ", must be " + want);
  }
  StatusOr<std::optional<double>> opt_num(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return type_error(key, "a number");
    return std::optional<double>(v->as_double());
  }
  StatusOr<double> num_or(std::string_view key, double def) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<double> v, opt_num(key));
    return v.value_or(def);
  }
  StatusOr<bool> bool_or(std::string_view key, bool def) const {
    const Json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_bool()) return type_error(key, "true or false");
    return v->as_bool();
  }
  StatusOr<std::string> str_or(std::string_view key, const std::string& def) const {
    const Json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_string()) return type_error(key, "a string");
    return v->as_string();
  }
  // An id or a list of ids (eos_token_id may be either); absent => empty.
  StatusOr<std::vector<int64_t>> ids(std::string_view key) const {
    const Json* v = find(key);
    std::vector<int64_t> out;
    if (v == nullptr) return out;
    if (!v->is_array()) {
      auto i = as_integer(*v);
      if (!i) return type_error(key, "an integer or a list of integers");
      out.push_back(*i);
      return out;
    }
    for (const Json& e : v->as_array()) {
      auto i = as_integer(e);
      if (!i) return type_error(key, "an integer or a list of integers");
      out.push_back(*i);
    }
    return out;
  }
  // A list of numbers; absent => empty.
  StatusOr<std::vector<double>> numbers(std::string_view key) const {
    const Json* v = find(key);
    std::vector<double> out;
    if (v == nullptr) return out;
    if (!v->is_array()) return type_error(key, "a list of numbers");
    for (const Json& e : v->as_array()) {
      if (!e.is_number()) return type_error(key, "a list of numbers");
      out.push_back(e.as_double());
    }
    return out;
  }
  const Json& json() const { return j_; }
  const std::string& where() const { return where_; }

  // Integers, and doubles with an integral value that fits (Json::as_int would not check).
  static std::optional<int64_t> as_integer(const Json& v) {
    if (v.is_int()) return v.as_int();
    if (v.is_number()) {
      const double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
        return static_cast<int64_t>(d);
      }
    }
    return std::nullopt;
  }

 private:
  const Json& j_;
  std::string where_;
};

}  // namespace kvasir
