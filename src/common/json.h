// Json: a small JSON value, a strict RFC 8259 parser with limits, and a serializer. Used for
// config.json, tokenizer.json, safetensors headers and (later) HTTP bodies, so the parser treats
// every input as hostile: bounded depth, validated UTF-8, no lone surrogates, clear errors with
// byte offsets. Objects keep insertion order (chat templates and tokenizer files depend on it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvasir {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;
  Json(std::nullptr_t) {}  // NOLINT
  Json(bool b) : type_(Type::kBool), b_(b) {}  // NOLINT
  Json(int v) : type_(Type::kInt), i_(v) {}  // NOLINT
  Json(int64_t v) : type_(Type::kInt), i_(v) {}  // NOLINT
  Json(uint32_t v) : type_(Type::kInt), i_(v) {}  // NOLINT
  Json(double v) : type_(Type::kDouble), d_(v) {}  // NOLINT
  Json(const char* s) : type_(Type::kString), s_(s) {}  // NOLINT
  Json(std::string s) : type_(Type::kString), s_(std::move(s)) {}  // NOLINT
  Json(std::string_view s) : type_(Type::kString), s_(s) {}  // NOLINT
  Json(Array a) : type_(Type::kArray), a_(std::move(a)) {}  // NOLINT
  Json(Object o) : type_(Type::kObject), o_(std::move(o)) {}  // NOLINT
  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kDouble; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors do not check: call the matching is_*() first (KVASIR_CHECK inside on misuse).
  bool as_bool() const;
  int64_t as_int() const;     // a kDouble with an integral value converts
  double as_double() const;   // a kInt converts
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object lookup: nullptr when absent or when this is not an object. Last duplicate key wins.
  const Json* find(std::string_view key) const;
  Json* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Sets (replacing) a key on an object.
  void set(std::string key, Json value);
  void push_back(Json value);
  size_t size() const;  // array or object element count, else 0

  // Convenience getters with defaults for config files.
  std::string get_string(std::string_view key, const std::string& def = "") const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_double(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;

  struct DumpOptions {
    int indent = -1;                 // <0: compact
    bool ensure_ascii = false;       // escape non-ASCII as \uXXXX
    const char* item_sep = ",";      // Python json.dumps separators
    const char* key_sep = ":";
    bool sort_keys = false;
  };
  std::string dump() const;
  std::string dump(const DumpOptions& opts) const;

  bool operator==(const Json& other) const;

 private:
  void dump_to(std::string& out, const DumpOptions& opts, int level) const;
  Type type_ = Type::kNull;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  Array a_;
  Object o_;
};

struct JsonParseLimits {
  int max_depth = 128;
  size_t max_string_bytes = 64u << 20;
  size_t max_elements = 16u << 20;  // total values in the document
};

StatusOr<Json> parse_json(std::string_view text, const JsonParseLimits& limits = {});

// Appends `s` as a JSON string literal (with quotes) to out.
void json_escape_to(std::string& out, std::string_view s, bool ensure_ascii = false);

}  // namespace kvasir
