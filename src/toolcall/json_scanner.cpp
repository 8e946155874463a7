#include "toolcall/json_scanner.h"

#include <cmath>
#include <cstdlib>

namespace kvasir::toolcall {
namespace {

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
int hex_digit(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
constexpr size_t kMaxNumberChars = 400;  // parse_json's limit

}  // namespace

JsonScanner::State JsonScanner::feed(std::string_view in, size_t* consumed) {
  size_t i = 0;
  while (i < in.size() && state_ == State::kMore) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    if (mode_ == Mode::kNumber) {
      bool took = false;
      if (!number_byte(c, &took)) {
        state_ = State::kError;
        break;
      }
      if (took) ++i;
      continue;
    }
    if (!step(c)) {
      state_ = State::kError;
      break;
    }
    ++i;
  }
  *consumed = i;
  return state_;
}

JsonScanner::State JsonScanner::finish() {
  if (state_ != State::kMore) return state_;
  bool terminal = num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExpDigits;
  if (mode_ == Mode::kNumber && stack_.empty() && terminal && end_number()) {
    state_ = State::kDone;
  } else {
    state_ = State::kError;
  }
  return state_;
}

void JsonScanner::value_done() {
  if (stack_.empty()) {
    state_ = State::kDone;
  } else {
    mode_ = Mode::kAfterValue;
  }
}

bool JsonScanner::end_number() {
  // parse_json turns integers past int64 into doubles and refuses what overflows a double.
  double d = std::strtod(number_.c_str(), nullptr);
  number_.clear();
  return std::isfinite(d);
}

bool JsonScanner::number_byte(unsigned char c, bool* consumed) {
  *consumed = false;
  bool terminate = false;
  switch (num_) {
    case Num::kMinus:
      if (c == '0') num_ = Num::kZero;
      else if (is_digit(c)) num_ = Num::kInt;
      else return false;
      break;
    case Num::kZero:
      if (c == '.') num_ = Num::kDot;
      else if (c == 'e' || c == 'E') num_ = Num::kExp;
      else if (is_digit(c)) return false;  // no leading zeros
      else terminate = true;
      break;
    case Num::kInt:
      if (c == '.') num_ = Num::kDot;
      else if (c == 'e' || c == 'E') num_ = Num::kExp;
      else if (!is_digit(c)) terminate = true;
      break;
    case Num::kDot:
      if (!is_digit(c)) return false;
      num_ = Num::kFrac;
      break;
    case Num::kFrac:
      if (c == 'e' || c == 'E') num_ = Num::kExp;
      else if (!is_digit(c)) terminate = true;
      break;
    case Num::kExp:
      if (c == '+' || c == '-') num_ = Num::kExpSign;
      else if (is_digit(c)) num_ = Num::kExpDigits;
      else return false;
      break;
    case Num::kExpSign:
      if (!is_digit(c)) return false;
      num_ = Num::kExpDigits;
      break;
    case Num::kExpDigits:
      if (!is_digit(c)) terminate = true;
      break;
  }
  if (terminate) {
    if (!end_number()) return false;
    value_done();
    if (state_ == State::kDone) return true;  // top level: c belongs to whatever follows
    if (!step(c)) return false;               // inside a container: c continues it
    *consumed = true;
    return true;
  }
  number_ += static_cast<char>(c);
  *consumed = true;
  return number_.size() <= kMaxNumberChars;
}

bool JsonScanner::string_byte(unsigned char c) {
  if (utf8_need_ > 0) {
    if (c < utf8_lo_ || c > utf8_hi_) return false;
    --utf8_need_;
    utf8_lo_ = 0x80;
    utf8_hi_ = 0xBF;
    return true;
  }
  if (c == '"') {
    if (string_is_key_) {
      mode_ = Mode::kColon;
    } else {
      value_done();
    }
    return true;
  }
  if (c == '\\') {
    mode_ = Mode::kEscape;
    return true;
  }
  if (c < 0x20) return false;
  if (c < 0x80) return true;
  // The strict UTF-8 ranges (no overlongs, no surrogates, nothing past U+10FFFF), checked per
  // byte so that no accepted prefix is already doomed.
  if (c >= 0xC2 && c <= 0xDF) {
    utf8_need_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    utf8_need_ = 2;
    if (c == 0xE0) utf8_lo_ = 0xA0;
    if (c == 0xED) utf8_hi_ = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    utf8_need_ = 3;
    if (c == 0xF0) utf8_lo_ = 0x90;
    if (c == 0xF4) utf8_hi_ = 0x8F;
  } else {
    return false;
  }
  return true;
}

bool JsonScanner::step(unsigned char c) {
  switch (mode_) {
    case Mode::kValue:
      if (is_ws(c) && !stack_.empty()) return true;
      switch (c) {
        case '{':
        case '[':
          if (stack_.size() >= kMaxDepth) return false;
          stack_.push_back(static_cast<char>(c));
          mode_ = c == '{' ? Mode::kObjectFirst : Mode::kArrayFirst;
          return true;
        case '"':
          string_is_key_ = false;
          mode_ = Mode::kString;
          return true;
        case 't': literal_ = "true"; break;
        case 'f': literal_ = "false"; break;
        case 'n': literal_ = "null"; break;
        default:
          if (c != '-' && !is_digit(c)) return false;
          number_.assign(1, static_cast<char>(c));
          num_ = c == '-' ? Num::kMinus : c == '0' ? Num::kZero : Num::kInt;
          mode_ = Mode::kNumber;
          return true;
      }
      literal_pos_ = 1;
      mode_ = Mode::kLiteral;
      return true;
    case Mode::kObjectFirst:
    case Mode::kObjectKey:
      if (is_ws(c)) return true;
      if (c == '}' && mode_ == Mode::kObjectFirst) {
        stack_.pop_back();
        value_done();
        return true;
      }
      if (c != '"') return false;
      string_is_key_ = true;
      mode_ = Mode::kString;
      return true;
    case Mode::kColon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      if (is_ws(c)) return true;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? Mode::kObjectKey : Mode::kValue;
        return true;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        value_done();
        return true;
      }
      return false;
    case Mode::kArrayFirst:
      if (is_ws(c)) return true;
      if (c == ']') {
        stack_.pop_back();
        value_done();
        return true;
      }
      mode_ = Mode::kValue;
      return step(c);
    case Mode::kString:
      return string_byte(c);
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kHex;
        hex_low_ = false;
        hex_value_ = 0;
        hex_digits_ = 0;
        return true;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') {
        return false;
      }
      mode_ = Mode::kString;
      return true;
    case Mode::kHex: {
      int d = hex_digit(c);
      if (d < 0) return false;
      hex_value_ = (hex_value_ << 4) | static_cast<uint32_t>(d);
      ++hex_digits_;
      // Surrogates show by the second digit: a low half must be DC..DF, anything else must not.
      if (hex_digits_ == 2) {
        bool low_half = hex_value_ >= 0xDC && hex_value_ <= 0xDF;
        if (low_half != hex_low_) return false;
      }
      if (hex_digits_ < 4) return true;
      bool high_half = !hex_low_ && hex_value_ >= 0xD800 && hex_value_ <= 0xDBFF;
      mode_ = high_half ? Mode::kLowBackslash : Mode::kString;
      return true;
    }
    case Mode::kLowBackslash:
      if (c != '\\') return false;
      mode_ = Mode::kLowU;
      return true;
    case Mode::kLowU:
      if (c != 'u') return false;
      mode_ = Mode::kHex;
      hex_low_ = true;
      hex_value_ = 0;
      hex_digits_ = 0;
      return true;
    case Mode::kLiteral:
      if (c != static_cast<unsigned char>(literal_[literal_pos_])) return false;
      if (literal_[++literal_pos_] == '\0') value_done();
      return true;
    case Mode::kNumber:
      break;  // handled by number_byte
  }
  return false;
}

}  // namespace kvasir::toolcall
