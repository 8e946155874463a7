// JsonCallReader: reads one tool call written as a JSON object, {"name": "f", "arguments": {...}},
// as its text arrives. It streams the arguments object's raw text (validated by JsonScanner) once
// the name is known (arguments written before the name wait for it), and says when the call
// begins and ends; hermes, llama3_json and mistral's JSON array share it. It decides nothing about
// what surrounds the object.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "toolcall/json_scanner.h"

namespace kvasir::toolcall {

struct JsonCallKeys {
  std::vector<std::string_view> args_keys;  // keys that hold the arguments object
  bool args_required = false;               // when false, a call without arguments gets "{}"
  bool any_extra_key = true;                // other keys are skipped; when false only extra_keys
  std::vector<std::string_view> extra_keys;
};

class JsonCallReader {
 public:
  enum class State { kMore, kDone, kError };
  // What one feed() decided, in this order: the call begins (name known and arguments started,
  // or the object ended without them), an arguments piece, the call ends (object closed).
  struct Events {
    bool begin = false;
    std::string name;
    std::string args;
    bool end = false;
  };
  static constexpr size_t kMaxNameBytes = 256;

  explicit JsonCallReader(const JsonCallKeys* keys) : keys_(keys) {}
  void reset() { *this = JsonCallReader(keys_); }
  // Feeds bytes from the object's '{' on; *consumed counts those taken (an error stops before the
  // offending byte). Events are appended to *ev.
  State feed(std::string_view in, size_t* consumed, Events* ev);
  bool begun() const { return begun_; }

 private:
  enum class Phase { kOpen, kFirstKey, kNextKey, kKey, kColon, kValueStart, kName, kArgs, kSkip, kAfterValue };
  enum class Slot { kName, kArgs, kOther };
  bool key_done();
  bool name_done(Events* ev);
  bool object_end(Events* ev);
  void begin(Events* ev);

  const JsonCallKeys* keys_;
  State state_ = State::kMore;
  Phase phase_ = Phase::kOpen;
  Slot slot_ = Slot::kOther;
  JsonScanner scan_;
  std::string raw_;           // the key or name string being read, quotes and escapes included
  std::string name_;
  std::string pending_args_;  // arguments read before the name
  bool have_name_ = false;
  bool args_started_ = false;
  bool begun_ = false;
};

}  // namespace kvasir::toolcall
