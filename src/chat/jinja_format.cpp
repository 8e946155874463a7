// Python printf-style formatting (`"%s - %d" % (a, b)` and the `format` filter), following
// CPython's str.__mod__ for the conversions templates use: s r a d i u x X o e E f F g G c %.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "chat/jinja_interp.h"
#include "chat/jinja_pystr.h"

namespace kvasir::jinja {
namespace {

struct Spec {
  bool left = false, zero = false, plus = false, space = false, alt = false;
  int64_t width = -1, precision = -1;
};

std::string pad_to(std::string body, const Spec& sp, bool numeric) {
  int64_t n = static_cast<int64_t>(py::cp_length(body));
  if (sp.width <= n) return body;
  size_t fill = static_cast<size_t>(sp.width - n);
  if (sp.left) return body + std::string(fill, ' ');
  if (sp.zero && numeric) {
    size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    if (body.size() > sign + 1 && body[sign] == '0' && (body[sign + 1] == 'x' || body[sign + 1] == 'X' || body[sign + 1] == 'o')) {
      sign += 2;
    }
    return body.substr(0, sign) + std::string(fill, '0') + body.substr(sign);
  }
  return std::string(fill, ' ') + body;
}

StatusOr<std::string> format_one(Interpreter& in, char conv, const Spec& sp, const Value& v) {
  char buf[512];
  switch (conv) {
    case 's': case 'r': case 'a': {
      KVASIR_ASSIGN_OR_RETURN(std::string s, conv == 's' ? in.str(v) : in.repr(v));
      if (sp.precision >= 0) {
        std::vector<uint32_t> cps = py::code_points(s);
        if (static_cast<int64_t>(cps.size()) > sp.precision) {
          std::string t;
          for (int64_t i = 0; i < sp.precision; ++i) py::append_cp(t, cps[static_cast<size_t>(i)]);
          s = std::move(t);
        }
      }
      return pad_to(std::move(s), sp, false);
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
      int64_t x = 0;
      bool int_only = conv == 'x' || conv == 'X' || conv == 'o';
      if (v.is_int()) {
        x = v.as_int();
      } else if (v.kind() == Kind::kFloat && !int_only) {
        double d = v.as_float();
        if (!std::isfinite(d)) return invalid_argument("cannot convert float to integer");
        if (std::fabs(d) >= 9.2e18) return out_of_range("integer overflow");
        x = static_cast<int64_t>(std::trunc(d));
      } else {
        return type_error(std::string("%") + conv + " format: " + (int_only ? "an integer" : "a real number") +
                          " is required, not " + type_name(v));
      }
      bool neg = x < 0;
      unsigned long long mag = neg ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
      const char* f = conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : conv == 'o' ? "%llo" : "%llu";
      std::snprintf(buf, sizeof(buf), f, mag);
      std::string digits = buf;
      if (sp.precision >= 0 && static_cast<int64_t>(digits.size()) < sp.precision && sp.precision < 4096) {
        digits = std::string(static_cast<size_t>(sp.precision) - digits.size(), '0') + digits;
      }
      std::string prefix = neg ? "-" : sp.plus ? "+" : sp.space ? " " : "";
      if (sp.alt && conv != 'd' && conv != 'i' && conv != 'u') prefix += conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X";
      return pad_to(prefix + digits, sp, true);
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
      if (!v.is_number()) return type_error(std::string("must be real number, not ") + type_name(v));
      std::string f = "%";
      if (sp.plus) f += '+';
      if (sp.space) f += ' ';
      if (sp.alt) f += '#';
      f += ".*";
      f += conv;
      int prec = static_cast<int>(sp.precision < 0 ? 6 : std::min<int64_t>(sp.precision, 300));
      std::snprintf(buf, sizeof(buf), f.c_str(), prec, v.as_float());
      return pad_to(buf, sp, std::isfinite(v.as_float()));
    }
    case 'c': {
      std::string s;
      if (v.is_int()) {
        int64_t c = v.as_int();
        if (c < 0 || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return out_of_range("%c arg not in range(0x110000)");
        py::append_cp(s, static_cast<uint32_t>(c));
      } else if (v.is_string() && py::cp_length(v.as_string()) == 1) {
        s = v.as_string();
      } else {
        return type_error("%c requires int or char");
      }
      return pad_to(std::move(s), sp, false);
    }
    default:
      return invalid_argument(std::string("unsupported format character '") + conv + "'");
  }
}

}  // namespace

StatusOr<std::string> percent_format(Interpreter& in, const std::string& fmt, const Value& args) {
  const bool mapping = args.kind() == Kind::kDict;
  ValueList pos;
  if (args.kind() == Kind::kTuple) {
    pos = args.as_list();
  } else if (!mapping) {
    pos.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) return invalid_argument("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      if (args.is_undefined()) return invalid_argument(args.as_string());
      if (!mapping) return type_error("format requires a mapping");
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) return invalid_argument("incomplete format key");
      arg = args.as_dict().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!arg) return invalid_argument("KeyError: " + py::repr(fmt.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    Spec sp;
    for (; i < fmt.size(); ++i) {
      char c = fmt[i];
      if (c == '-') sp.left = true;
      else if (c == '0') sp.zero = true;
      else if (c == '+') sp.plus = true;
      else if (c == ' ') sp.space = true;
      else if (c == '#') sp.alt = true;
      else break;
    }
    auto number = [&](int64_t* dst) -> Status {
      if (i < fmt.size() && fmt[i] == '*') return unimplemented("'*' widths in % formatting are not supported");
      if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        *dst = 0;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
          *dst = *dst * 10 + (fmt[i++] - '0');
          if (*dst > (1 << 20)) return out_of_range("format width is larger than the limit");
        }
      }
      return Status();
    };
    KVASIR_RETURN_IF_ERROR(number(&sp.width));
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      sp.precision = 0;
      KVASIR_RETURN_IF_ERROR(number(&sp.precision));
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) return invalid_argument("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (mapping) {
        arg = &args;
      } else {
        if (next >= pos.size()) return type_error("not enough arguments for format string");
        arg = &pos[next++];
      }
    }
    KVASIR_ASSIGN_OR_RETURN(std::string piece, format_one(in, conv, sp, *arg));
    out += piece;
    KVASIR_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  // CPython skips this check when the argument supports __getitem__ (dicts, but also lists).
  if (!mapping && args.kind() != Kind::kList && !args.is_undefined() && next < pos.size()) {
    return type_error("not all arguments converted during string formatting");
  }
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(out.size()));
  return out;
}

}  // namespace kvasir::jinja

// ---- str.format (jinja's SandboxedFormatter: field lookups go through the sandbox) ----
namespace kvasir::jinja {
namespace {

struct FormatSpec {
  std::string fill = " ";
  char align = 0, sign = '-', type = 0, grouping = 0;
  bool alt = false, zero = false;
  int64_t width = -1, precision = -1;
};

StatusOr<FormatSpec> parse_spec(const std::string& spec) {
  FormatSpec f;
  std::vector<uint32_t> cps = py::code_points(spec);
  size_t i = 0;
  auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    f.fill.clear();
    py::append_cp(f.fill, cps[0]);
    f.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    f.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) f.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '#') {
    f.alt = true;
    ++i;
  }
  if (i < cps.size() && cps[i] == '0') {
    f.zero = true;
    ++i;
  }
  auto number = [&](int64_t* out) {
    if (i >= cps.size() || cps[i] < '0' || cps[i] > '9') return;
    *out = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9' && *out < (1 << 20)) *out = *out * 10 + (cps[i++] - '0');
  };
  number(&f.width);
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) f.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    f.precision = -2;
    number(&f.precision);
    if (f.precision == -2) return invalid_argument("Format specifier missing precision");
  }
  if (i < cps.size()) f.type = static_cast<char>(cps[i++]);
  if (i != cps.size() || f.width >= (1 << 20) || f.precision >= (1 << 10)) return invalid_argument("Invalid format specifier");
  return f;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k && (n - k) % 3 == 0) out += sep;
    out += digits[k];
  }
  return out;
}

std::string align_to(const std::string& body, size_t sign_len, const FormatSpec& f, char def_align) {
  int64_t n = static_cast<int64_t>(py::cp_length(body));
  if (f.width <= n) return body;
  int64_t pad = f.width - n;
  char align = f.align ? f.align : def_align;
  std::string fill = f.fill;
  auto rep = [&](int64_t k) {
    std::string s;
    for (int64_t j = 0; j < k; ++j) s += fill;
    return s;
  };
  if (align == '<') return body + rep(pad);
  if (align == '>') return rep(pad) + body;
  if (align == '^') return rep(pad / 2) + body + rep(pad - pad / 2);
  return body.substr(0, sign_len) + rep(pad) + body.substr(sign_len);  // '=': after the sign
}

StatusOr<std::string> format_value(Interpreter& in, const Value& v, const std::string& spec) {
  if (spec.empty()) return in.str(v);
  KVASIR_ASSIGN_OR_RETURN(FormatSpec f, parse_spec(spec));
  if (f.zero && !f.align) {
    f.fill = "0";
    f.align = '=';
  }
  if (v.is_string()) {
    if (f.type && f.type != 's') return invalid_argument(std::string("Unknown format code '") + f.type + "' for object of type 'str'");
    if (f.align == '=') return invalid_argument("'=' alignment not allowed in string format specifier");
    std::string s = v.as_string();
    if (f.precision >= 0) {
      std::vector<uint32_t> cps = py::code_points(s);
      s.clear();
      for (int64_t k = 0; k < f.precision && k < static_cast<int64_t>(cps.size()); ++k) py::append_cp(s, cps[static_cast<size_t>(k)]);
    }
    return align_to(s, 0, f, '<');
  }
  if (!v.is_number()) {
    return type_error(std::string("unsupported format string passed to ") + type_name(v) + ".__format__");
  }
  char t = f.type;
  bool as_int = v.is_int() && (t == 0 || t == 'd' || t == 'b' || t == 'o' || t == 'x' || t == 'X' || t == 'c' || t == 'n');
  std::string sign_str, body;
  if (as_int) {
    if (f.precision >= 0) return invalid_argument("Precision not allowed in integer format specifier");
    int64_t x = v.as_int();
    unsigned long long mag = x < 0 ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
    if (t == 'c') {
      if (x < 0 || x > 0x10FFFF || (x >= 0xD800 && x <= 0xDFFF)) return out_of_range("%c arg not in range(0x110000)");
      py::append_cp(body, static_cast<uint32_t>(x));
    } else {
      int base = t == 'b' ? 2 : t == 'o' ? 8 : (t == 'x' || t == 'X') ? 16 : 10;
      std::string digits;
      do {
        int d = static_cast<int>(mag % base);
        digits.insert(digits.begin(), static_cast<char>(d < 10 ? '0' + d : (t == 'X' ? 'A' : 'a') + d - 10));
        mag /= base;
      } while (mag);
      if (f.grouping) digits = group_digits(digits, f.grouping);
      if (f.alt && base != 10) body = t == 'b' ? "0b" : t == 'o' ? "0o" : t == 'X' ? "0X" : "0x";
      body += digits;
    }
    sign_str = x < 0 ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
  } else {
    if (t && std::string("eEfFgGn%").find(t) == std::string::npos) {
      return invalid_argument(std::string("Unknown format code '") + t + "' for object of type '" + type_name(v) + "'");
    }
    double d = v.as_float();
    bool neg = std::signbit(d) && !std::isnan(d);
    double a = std::fabs(d);
    char buf[1400];
    int prec = static_cast<int>(f.precision < 0 ? 6 : f.precision);
    if (t == 0 && f.precision < 0) {
      body = py::float_repr(a);
    } else if (t == 0) {
      std::snprintf(buf, sizeof(buf), "%.*g", std::max(prec, 1), a);
      body = buf;
      if (std::isfinite(a) && body.find_first_of(".e") == std::string::npos) body += ".0";
    } else if (t == '%') {
      std::snprintf(buf, sizeof(buf), "%.*f", prec, a * 100);
      body = std::string(buf) + "%";
    } else {
      char c = t == 'n' ? 'g' : t;
      std::snprintf(buf, sizeof(buf), (std::string("%") + (f.alt ? "#" : "") + ".*" + c).c_str(), prec, a);
      body = buf;
    }
    if (f.grouping && std::isfinite(a)) {
      size_t end = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, end), f.grouping) + (end == std::string::npos ? "" : body.substr(end));
    }
    sign_str = neg ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
  }
  return align_to(sign_str + body, sign_str.size() + ((f.alt && as_int && t != 'd' && t) ? 2 : 0), f, '>');
}

}  // namespace

StatusOr<std::string> str_format(Interpreter& in, const std::string& fmt, const CallArgs& args) {
  std::string out;
  int auto_index = 0;
  bool used_auto = false, used_manual = false;
  auto resolve = [&](const std::string& field) -> StatusOr<Value> {
    size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[') ++k;
    std::string head = field.substr(0, k);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      size_t idx;
      if (head.empty()) {
        if (used_manual) return invalid_argument("cannot switch from manual field specification to automatic field numbering");
        used_auto = true;
        idx = static_cast<size_t>(auto_index++);
      } else {
        if (used_auto) return invalid_argument("cannot switch from automatic field numbering to manual field specification");
        used_manual = true;
        if (head.size() > 9) return invalid_argument("Too many decimal digits in format string");
        idx = static_cast<size_t>(std::stoul(head));
      }
      if (idx >= args.pos.size()) return invalid_argument("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = args.pos[idx];
    } else {
      const Value* kv = nullptr;
      for (const auto& [name, x] : args.kw) {
        if (name == head) kv = &x;
      }
      if (!kv) return invalid_argument("KeyError: " + py::repr(head));
      v = *kv;
    }
    while (k < field.size()) {
      if (field[k] == '.') {
        size_t e = field.find_first_of(".[", k + 1);
        std::string attr = field.substr(k + 1, e == std::string::npos ? std::string::npos : e - k - 1);
        KVASIR_ASSIGN_OR_RETURN(v, in.getattr(v, attr));
        k = e == std::string::npos ? field.size() : e;
      } else {
        size_t e = field.find(']', k);
        if (e == std::string::npos) return invalid_argument("Missing ']' in format string");
        std::string key = field.substr(k + 1, e - k - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        KVASIR_ASSIGN_OR_RETURN(v, in.getitem(v, digits && key.size() < 18 ? Value::integer(std::stoll(key)) : Value::string(key)));
        k = e + 1;
      }
      if (v.is_undefined()) return invalid_argument(v.as_string());
    }
    return v;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return invalid_argument("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // Find the matching '}' (one level of nested fields in the spec).
    size_t j = i + 1;
    int depth = 1;
    for (; j < fmt.size() && depth; ++j) depth += fmt[j] == '{' ? 1 : fmt[j] == '}' ? -1 : 0;
    if (depth) return invalid_argument("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, j - i - 2);
    i = j - 1;
    std::string spec, conv;
    size_t colon = std::string::npos, bang = std::string::npos;
    for (size_t k = 0, br = 0; k < field.size(); ++k) {
      if (field[k] == '[') br = 1;
      if (field[k] == ']') br = 0;
      if (br) continue;
      if (field[k] == '!' && bang == std::string::npos && colon == std::string::npos) bang = k;
      if (field[k] == ':' && colon == std::string::npos) {
        colon = k;
        break;
      }
    }
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
      if (conv != "r" && conv != "s" && conv != "a") return invalid_argument("Unknown conversion specifier " + conv);
    }
    if (spec.find('{') != std::string::npos) {
      KVASIR_ASSIGN_OR_RETURN(spec, str_format(in, spec, args));
    }
    KVASIR_ASSIGN_OR_RETURN(Value v, resolve(field));
    if (!conv.empty()) {
      KVASIR_ASSIGN_OR_RETURN(std::string text, conv == "s" ? in.str(v) : in.repr(v));
      v = Value::string(std::move(text));
    }
    KVASIR_ASSIGN_OR_RETURN(std::string piece, format_value(in, v, spec));
    out += piece;
    KVASIR_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(out.size()));
  return out;
}

}  // namespace kvasir::jinja
