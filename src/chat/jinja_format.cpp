// Python printf-style formatting (`"%s - %d" % (a, b)` and the `format` filter), following
// CPython's str.__mod__ for the conversions templates use: s r a d i u x X o e E f F g G c %.
#include <cmath>
#include <cstdio>

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

StatusOr<std::string> format_one(char conv, const Spec& sp, const Value& v) {
  char buf[512];
  switch (conv) {
    case 's': case 'r': case 'a': {
      std::string s = conv == 's' ? to_str(v) : repr(v);
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
    KVASIR_ASSIGN_OR_RETURN(std::string piece, format_one(conv, sp, *arg));
    out += piece;
    KVASIR_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  // CPython skips this check when the argument supports __getitem__ (dicts, but also lists).
  if (!mapping && args.kind() != Kind::kList && next < pos.size()) {
    return type_error("not all arguments converted during string formatting");
  }
  KVASIR_RETURN_IF_ERROR(in.charge_bytes(out.size()));
  return out;
}

}  // namespace kvasir::jinja
