// JsonScanner: an incremental, strict JSON validator for text that arrives in pieces. It finds
// where one value ends without building it, so a tool-call parser can stream the raw bytes of an
// arguments object as they are generated and stop at the first byte that cannot continue valid
// JSON: every prefix it accepts can still become a document parse_json accepts (same escapes,
// UTF-8, surrogate and number rules; a lower depth limit). It never builds values or allocates per
// byte; parse_json does the building once a value is complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::toolcall {

class JsonScanner {
 public:
  enum class State { kMore, kDone, kError };
  static constexpr size_t kMaxDepth = 100;  // parse_json allows 128

  // Consumes bytes of `in`, starting at the value's first byte (no leading whitespace), until the
  // value ends (kDone), a byte cannot continue it (kError; that byte is not consumed), or `in`
  // runs out (kMore). *consumed counts the bytes taken. A number at the top level ends at the
  // first byte that cannot extend it (kDone, that byte not consumed) or at finish().
  State feed(std::string_view in, size_t* consumed);
  // End of input: completes a top-level number; anything else unfinished is an error.
  State finish();
  State state() const { return state_; }
  void reset() { *this = JsonScanner(); }

 private:
  enum class Mode : uint8_t {
    kValue,         // a value must start here
    kObjectFirst,   // after '{': '}' or a key
    kObjectKey,     // after ',' in an object: a key
    kColon,         // after a key
    kAfterValue,    // inside a container after a value: ',' or the closing bracket
    kArrayFirst,    // after '[': ']' or a value
    kString,        // inside a string
    kEscape,        // after '\' in a string
    kHex,           // reading the 4 hex digits of \u
    kLowBackslash,  // after a high surrogate escape: '\' of the low half
    kLowU,          // after that '\': 'u'
    kNumber,        // inside a number (num_ says where)
    kLiteral,       // inside true / false / null
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  bool step(unsigned char c);  // false: c cannot continue the value
  bool string_byte(unsigned char c);
  bool number_byte(unsigned char c, bool* consumed);
  bool end_number();
  void value_done();

  State state_ = State::kMore;
  Mode mode_ = Mode::kValue;
  Num num_ = Num::kMinus;
  bool string_is_key_ = false;
  bool hex_low_ = false;      // the \u being read is the low half of a surrogate pair
  uint32_t hex_value_ = 0;
  int hex_digits_ = 0;
  int utf8_need_ = 0;         // continuation bytes still expected in a string
  unsigned char utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // allowed range of the next continuation byte
  const char* literal_ = nullptr;
  size_t literal_pos_ = 0;
  std::string number_;        // the number's text, to check its range as parse_json does
  std::vector<char> stack_;   // open containers: '{' or '['
};

}  // namespace kvasir::toolcall
