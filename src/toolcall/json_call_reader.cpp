#include "toolcall/json_call_reader.h"

#include <algorithm>

#include "common/json.h"
#include "common/text_match.h"

namespace kvasir::toolcall {
namespace {

// Decodes a complete JSON string literal.
bool decode_string(const std::string& raw, std::string* out) {
  auto j = parse_json(raw);
  if (!j.ok() || !j->is_string()) return false;
  *out = j->as_string();
  return true;
}

bool contains(const std::vector<std::string_view>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

void JsonCallReader::begin(Events* ev) {
  begun_ = true;
  ev->begin = true;
  ev->name = name_;
  ev->args += pending_args_;
  pending_args_.clear();
}

bool JsonCallReader::key_done() {
  std::string key;
  if (!decode_string(raw_, &key)) return false;
  if (key == "name") {
    if (have_name_) return false;  // a second name: not a call we can trust
    slot_ = Slot::kName;
  } else if (contains(keys_->args_keys, key)) {
    if (args_started_) return false;
    slot_ = Slot::kArgs;
  } else {
    if (!keys_->any_extra_key && !contains(keys_->extra_keys, key)) return false;
    slot_ = Slot::kOther;
  }
  phase_ = Phase::kColon;
  return true;
}

bool JsonCallReader::name_done(Events* ev) {
  if (!decode_string(raw_, &name_) || name_.empty() || name_.size() > kMaxNameBytes) return false;
  for (char c : name_) {
    if (static_cast<unsigned char>(c) < 0x20) return false;
  }
  have_name_ = true;
  if (args_started_) begin(ev);
  phase_ = Phase::kAfterValue;
  return true;
}

bool JsonCallReader::object_end(Events* ev) {
  if (!have_name_) return false;
  if (!args_started_) {
    if (keys_->args_required) return false;
    begin(ev);
    ev->args += "{}";
  }
  ev->end = true;
  state_ = State::kDone;
  return true;
}

JsonCallReader::State JsonCallReader::feed(std::string_view in, size_t* consumed, Events* ev) {
  size_t i = 0;
  auto fail = [&] {
    state_ = State::kError;
    *consumed = i;
    return state_;
  };
  while (i < in.size() && state_ == State::kMore) {
    char c = in[i];
    switch (phase_) {
      case Phase::kOpen:
        if (c != '{') return fail();
        phase_ = Phase::kFirstKey;
        ++i;
        break;
      case Phase::kFirstKey:
      case Phase::kNextKey:
        if (is_space(c)) {
          ++i;
          break;
        }
        if (c == '}' && phase_ == Phase::kFirstKey) {
          if (!object_end(ev)) return fail();
          ++i;
          break;
        }
        if (c != '"') return fail();
        raw_.clear();
        scan_.reset();
        phase_ = Phase::kKey;
        break;
      case Phase::kColon:
        if (is_space(c)) {
          ++i;
          break;
        }
        if (c != ':') return fail();
        phase_ = Phase::kValueStart;
        ++i;
        break;
      case Phase::kValueStart:
        if (is_space(c)) {
          ++i;
          break;
        }
        scan_.reset();
        raw_.clear();
        if (slot_ == Slot::kName) {
          if (c != '"') return fail();
          phase_ = Phase::kName;
        } else if (slot_ == Slot::kArgs) {
          if (c != '{') return fail();  // arguments are an object, nothing else
          args_started_ = true;
          if (have_name_) begin(ev);
          phase_ = Phase::kArgs;
        } else {
          phase_ = Phase::kSkip;
        }
        break;
      case Phase::kKey:
      case Phase::kName:
      case Phase::kArgs:
      case Phase::kSkip: {
        size_t n = 0;
        JsonScanner::State s = scan_.feed(in.substr(i), &n);
        std::string_view piece = in.substr(i, n);
        i += n;
        if (phase_ == Phase::kKey || phase_ == Phase::kName) {
          raw_.append(piece);
          if (raw_.size() > 4 * kMaxNameBytes + 2) return fail();
        } else if (phase_ == Phase::kArgs) {
          (begun_ ? ev->args : pending_args_).append(piece);
        }
        if (s == JsonScanner::State::kError) return fail();
        if (s == JsonScanner::State::kMore) break;
        if (phase_ == Phase::kKey) {
          if (!key_done()) return fail();
        } else if (phase_ == Phase::kName) {
          if (!name_done(ev)) return fail();
        } else {
          phase_ = Phase::kAfterValue;
        }
        break;
      }
      case Phase::kAfterValue:
        if (is_space(c)) {
          ++i;
          break;
        }
        if (c == ',') {
          phase_ = Phase::kNextKey;
          ++i;
          break;
        }
        if (c != '}' || !object_end(ev)) return fail();
        ++i;
        break;
    }
  }
  *consumed = i;
  return state_;
}

}  // namespace kvasir::toolcall
