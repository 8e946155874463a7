#include "common/json.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>

#include "common/check.h"
#include "common/utf8.h"

namespace kvasir {

bool Json::as_bool() const {
  KVASIR_CHECK(type_ == Type::kBool);
  return b_;
}
int64_t Json::as_int() const {
  if (type_ == Type::kDouble) {
    // Saturate: converting an out-of-range double is undefined behaviour.
    if (!(d_ >= -9.2233720368547758e18)) return d_ != d_ ? 0 : INT64_MIN;
    if (d_ >= 9.2233720368547758e18) return INT64_MAX;
    return static_cast<int64_t>(d_);
  }
  KVASIR_CHECK(type_ == Type::kInt);
  return i_;
}
double Json::as_double() const {
  if (type_ == Type::kInt) return static_cast<double>(i_);
  KVASIR_CHECK(type_ == Type::kDouble);
  return d_;
}
const std::string& Json::as_string() const {
  KVASIR_CHECK(type_ == Type::kString);
  return s_;
}
const Json::Array& Json::as_array() const {
  KVASIR_CHECK(type_ == Type::kArray);
  return a_;
}
Json::Array& Json::as_array() {
  KVASIR_CHECK(type_ == Type::kArray);
  return a_;
}
const Json::Object& Json::as_object() const {
  KVASIR_CHECK(type_ == Type::kObject);
  return o_;
}
Json::Object& Json::as_object() {
  KVASIR_CHECK(type_ == Type::kObject);
  return o_;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (auto it = o_.rbegin(); it != o_.rend(); ++it) {
    if (it->first == key) return &it->second;
  }
  return nullptr;
}
Json* Json::find(std::string_view key) {
  return const_cast<Json*>(static_cast<const Json*>(this)->find(key));
}

void Json::set(std::string key, Json value) {
  if (type_ == Type::kNull) type_ = Type::kObject;
  KVASIR_CHECK(type_ == Type::kObject);
  if (Json* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  o_.emplace_back(std::move(key), std::move(value));
}

void Json::push_back(Json value) {
  if (type_ == Type::kNull) type_ = Type::kArray;
  KVASIR_CHECK(type_ == Type::kArray);
  a_.push_back(std::move(value));
}

size_t Json::size() const {
  if (type_ == Type::kArray) return a_.size();
  if (type_ == Type::kObject) return o_.size();
  return 0;
}

std::string Json::get_string(std::string_view key, const std::string& def) const {
  const Json* v = find(key);
  return v && v->is_string() ? v->s_ : def;
}
int64_t Json::get_int(std::string_view key, int64_t def) const {
  const Json* v = find(key);
  if (!v || !v->is_number()) return def;
  return v->as_int();
}
double Json::get_double(std::string_view key, double def) const {
  const Json* v = find(key);
  return v && v->is_number() ? v->as_double() : def;
}
bool Json::get_bool(std::string_view key, bool def) const {
  const Json* v = find(key);
  return v && v->is_bool() ? v->b_ : def;
}

bool Json::operator==(const Json& o) const {
  if (is_number() && o.is_number()) {
    if (type_ == Type::kInt && o.type_ == Type::kInt) return i_ == o.i_;
    return as_double() == o.as_double();
  }
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::kNull: return true;
    case Type::kBool: return b_ == o.b_;
    case Type::kString: return s_ == o.s_;
    case Type::kArray: return a_ == o.a_;
    case Type::kObject: return o_ == o.o_;
    default: return false;
  }
}

// ---------------------------------------------------------------- serialization

void json_escape_to(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t n = utf8_decode(s, i, &cp);
    if (n == 0) {  // invalid byte: emit U+FFFD rather than broken JSON
      cp = 0xFFFD;
      n = 1;
    }
    auto emit16 = [&](uint32_t u) {
      out += "\\u";
      for (int sh = 12; sh >= 0; sh -= 4) out += kHex[(u >> sh) & 15];
    };
    if (cp >= 0x10000) {
      cp -= 0x10000;
      emit16(0xD800 + (cp >> 10));
      emit16(0xDC00 + (cp & 0x3FF));
    } else {
      emit16(cp);
    }
    i += n;
  }
  out += '"';
}

static void dump_double(std::string& out, double d) {
  if (!std::isfinite(d)) {  // JSON has no NaN/Infinity; we write null rather than invalid JSON
    out += "null";
    return;
  }
  // Python's repr(float): shortest round-tripping digits; scientific when exp < -4 or >= 16.
  char buf[48];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string sci(buf);
  size_t epos = sci.find('e');
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string mant = sci.substr(0, epos);
  bool neg = !mant.empty() && mant[0] == '-';
  std::string digits;
  for (char c : mant) if (c >= '0' && c <= '9') digits += c;
  std::string res = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    res += digits.substr(0, 1);
    if (digits.size() > 1) {
      // Appended in two steps: GCC 12 -O3 reports a false -Wrestrict on "." + substr().
      res += '.';
      res.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    res += eb;
  } else if (exp < 0) {
    res += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      res += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      res += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  out += res;
}

void Json::dump_to(std::string& out, const DumpOptions& opts, int level) const {
  auto newline = [&](int lvl) {
    if (opts.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(opts.indent * lvl), ' ');
  };
  switch (type_) {
    case Type::kNull: out += "null"; break;
    case Type::kBool: out += b_ ? "true" : "false"; break;
    case Type::kInt: out += std::to_string(i_); break;
    case Type::kDouble: dump_double(out, d_); break;
    case Type::kString: json_escape_to(out, s_, opts.ensure_ascii); break;
    case Type::kArray:
      out += '[';
      for (size_t i = 0; i < a_.size(); ++i) {
        if (i > 0) out += opts.item_sep;
        newline(level + 1);
        a_[i].dump_to(out, opts, level + 1);
      }
      if (!a_.empty()) newline(level);
      out += ']';
      break;
    case Type::kObject: {
      out += '{';
      std::vector<const std::pair<std::string, Json>*> items;
      items.reserve(o_.size());
      for (const auto& kv : o_) items.push_back(&kv);
      if (opts.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += opts.item_sep;
        newline(level + 1);
        json_escape_to(out, items[i]->first, opts.ensure_ascii);
        out += opts.key_sep;
        items[i]->second.dump_to(out, opts, level + 1);
      }
      if (!items.empty()) newline(level);
      out += '}';
      break;
    }
  }
}

std::string Json::dump() const { return dump(DumpOptions{}); }
std::string Json::dump(const DumpOptions& opts) const {
  std::string out;
  dump_to(out, opts, 0);
  return out;
}

// ---------------------------------------------------------------- parsing

namespace {

class Parser {
 public:
  Parser(std::string_view text, const JsonParseLimits& limits) : s_(text), limits_(limits) {}

  StatusOr<Json> parse_document() {
    skip_ws();
    Json v;
    KVASIR_RETURN_IF_ERROR(parse_value(v, 0));
    skip_ws();
    if (pos_ != s_.size()) return error("unexpected trailing characters");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("invalid JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Status parse_value(Json& out, int depth) {
    if (depth > limits_.max_depth) return error("nesting deeper than " + std::to_string(limits_.max_depth));
    if (++num_elements_ > limits_.max_elements) return error("too many values");
    if (pos_ >= s_.size()) return error("unexpected end of input");
    char c = s_[pos_];
    switch (c) {
      case '{': return parse_object(out, depth);
      case '[': return parse_array(out, depth);
      case '"': {
        std::string str;
        KVASIR_RETURN_IF_ERROR(parse_string(str));
        out = Json(std::move(str));
        return Status();
      }
      case 't':
        if (consume("true")) { out = Json(true); return Status(); }
        return error("invalid literal");
      case 'f':
        if (consume("false")) { out = Json(false); return Status(); }
        return error("invalid literal");
      case 'n':
        if (consume("null")) { out = Json(); return Status(); }
        return error("invalid literal");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        return error(std::string("unexpected character '") + (c >= 0x20 && c < 0x7f ? std::string(1, c) : "?") + "'");
    }
  }

  Status parse_object(Json& out, int depth) {
    ++pos_;  // '{'
    Json::Object obj;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      out = Json(std::move(obj));
      return Status();
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a string key");
      std::string key;
      KVASIR_RETURN_IF_ERROR(parse_string(key));
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
      ++pos_;
      skip_ws();
      Json value;
      KVASIR_RETURN_IF_ERROR(parse_value(value, depth + 1));
      obj.emplace_back(std::move(key), std::move(value));
      skip_ws();
      if (pos_ >= s_.size()) return error("unterminated object");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == '}') { ++pos_; break; }
      return error("expected ',' or '}'");
    }
    out = Json(std::move(obj));
    return Status();
  }

  Status parse_array(Json& out, int depth) {
    ++pos_;  // '['
    Json::Array arr;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      out = Json(std::move(arr));
      return Status();
    }
    while (true) {
      skip_ws();
      Json value;
      KVASIR_RETURN_IF_ERROR(parse_value(value, depth + 1));
      arr.push_back(std::move(value));
      skip_ws();
      if (pos_ >= s_.size()) return error("unterminated array");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == ']') { ++pos_; break; }
      return error("expected ',' or ']'");
    }
    out = Json(std::move(arr));
    return Status();
  }

  Status parse_hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return error("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') *v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') *v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') *v |= static_cast<uint32_t>(c - 'A' + 10);
      else return error("invalid \\u escape");
    }
    return Status();
  }

  // Bytes from pos_ (just past an opening quote) to the closing quote, or to the end of the
  // text if there is none.
  size_t raw_string_span() const {
    size_t i = pos_;
    while (i < s_.size()) {
      const char c = s_[i];
      if (c == '"') break;
      i += c == '\\' ? 2 : 1;
    }
    return std::min(i, s_.size()) - pos_;
  }

  Status parse_string(std::string& out) {
    ++pos_;  // opening quote
    // Escapes only shorten text, so the raw span up to the closing quote bounds the result:
    // reserving it once keeps a big string (a 30 MB prompt) at one copy, never two while growing.
    out.reserve(std::min(raw_string_span(), limits_.max_string_bytes + 1));
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated string");
      if (out.size() > limits_.max_string_bytes) return error("string too long");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
        // A run of plain ASCII is appended at once.
        size_t end = pos_ + 1;
        while (end < s_.size()) {
          const unsigned char d = static_cast<unsigned char>(s_[end]);
          if (d < 0x20 || d >= 0x80 || d == '"' || d == '\\') break;
          ++end;
        }
        out.append(s_.data() + pos_, end - pos_);
        pos_ = end;
        continue;
      }
      if (c == '"') {
        ++pos_;
        return Status();
      }
      if (c < 0x20) return error("control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) return error("unterminated escape");
        char e = s_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = 0;
            KVASIR_RETURN_IF_ERROR(parse_hex4(&cp));
            if (cp >= 0xDC00 && cp <= 0xDFFF) return error("lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (!consume("\\u")) return error("lone high surrogate in \\u escape");
              uint32_t lo = 0;
              KVASIR_RETURN_IF_ERROR(parse_hex4(&lo));
              if (lo < 0xDC00 || lo > 0xDFFF) return error("invalid surrogate pair");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            utf8_append(out, cp);
            break;
          }
          default: return error("invalid escape");
        }
        continue;
      }
      uint32_t cp;
      size_t n = utf8_decode(s_, pos_, &cp);
      if (n == 0) return error("invalid UTF-8 in string");
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  Status parse_number(Json& out) {
    size_t start = pos_;
    bool is_float = false;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size()) return error("truncated number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else if (s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    } else {
      return error("invalid number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_float = true;
      ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') return error("invalid number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      is_float = true;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') return error("invalid number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ - start > 400) return error("number too long");
    std::string text(s_.substr(start, pos_ - start));
    if (!is_float) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0) {
        out = Json(static_cast<int64_t>(v));
        return Status();
      }
      // Integer beyond int64: keep it as a double, like many JSON libraries.
    }
    double d = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(d)) return error("number out of range");
    out = Json(d);
    return Status();
  }

  std::string_view s_;
  JsonParseLimits limits_;
  size_t pos_ = 0;
  size_t num_elements_ = 0;
};

}  // namespace

StatusOr<Json> parse_json(std::string_view text, const JsonParseLimits& limits) {
  Parser p(text, limits);
  return p.parse_document();
}

}  // namespace kvasir
