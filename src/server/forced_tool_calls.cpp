#include "server/forced_tool_calls.h"

#include <cctype>

#include "common/json.h"
#include "toolcall/tool_call_id.h"

namespace kvasir::server {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view t, size_t p) {
  while (p < t.size() && is_ws(t[p])) ++p;
  return p;
}

struct ValueEnd {
  size_t end = 0;        // one past the value (or the text's end while open)
  bool complete = false;
  bool ok = true;
};

// A string starting at p (t[p] == '"').
ValueEnd skip_string(std::string_view t, size_t p) {
  for (size_t i = p + 1; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;
    } else if (t[i] == '"') {
      return {i + 1, true, true};
    }
  }
  return {t.size(), false, true};
}

// Any JSON value starting at p, without checking it beyond its brackets and strings (the
// grammar made it valid; the whole-output parse checks it again).
ValueEnd skip_value(std::string_view t, size_t p) {
  if (p >= t.size()) return {p, false, true};
  const char c = t[p];
  if (c == '"') return skip_string(t, p);
  if (c == '{' || c == '[') {
    int depth = 0;
    for (size_t i = p; i < t.size(); ++i) {
      const char d = t[i];
      if (d == '"') {
        ValueEnd s = skip_string(t, i);
        if (!s.complete) return {t.size(), false, true};
        i = s.end - 1;
      } else if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return {i + 1, true, true};
      }
    }
    return {t.size(), false, true};
  }
  size_t i = p;
  while (i < t.size() && (std::isalnum(static_cast<unsigned char>(t[i])) || t[i] == '-' || t[i] == '+' || t[i] == '.')) ++i;
  if (i == p) return {p, false, false};
  return {i, i < t.size(), true};
}

std::string decode_string(std::string_view literal) {
  auto j = parse_json(literal);
  return j.ok() && j->is_string() ? j->as_string() : std::string();
}

}  // namespace

RequiredCallsScan scan_required_calls(std::string_view t) {
  RequiredCallsScan s;
  size_t p = skip_ws(t, 0);
  if (p >= t.size()) return s;
  if (t[p] != '[') {
    s.valid = false;
    return s;
  }
  p = skip_ws(t, p + 1);
  if (p < t.size() && t[p] == ']') {
    s.closed = true;
    return s;
  }
  while (p < t.size()) {
    if (t[p] != '{') {
      s.valid = false;
      return s;
    }
    s.calls.emplace_back();
    RequiredCallsScan::Call& call = s.calls.back();
    p = skip_ws(t, p + 1);
    if (p < t.size() && t[p] == '}') {
      ++p;
    } else {
      for (;;) {  // members
        if (p >= t.size()) return s;
        if (t[p] != '"') {
          s.valid = false;
          return s;
        }
        ValueEnd key = skip_string(t, p);
        if (!key.complete) return s;
        const std::string name = decode_string(t.substr(p, key.end - p));
        p = skip_ws(t, key.end);
        if (p >= t.size()) return s;
        if (t[p] != ':') {
          s.valid = false;
          return s;
        }
        p = skip_ws(t, p + 1);
        if (p >= t.size()) return s;
        ValueEnd v = skip_value(t, p);
        if (!v.ok) {
          s.valid = false;
          return s;
        }
        if (name == "name") {
          if (t[p] != '"') {
            s.valid = false;
            return s;
          }
          if (!v.complete) return s;
          call.name = decode_string(t.substr(p, v.end - p));
          call.name_done = true;
        } else if (name == "parameters") {
          call.args_begin = p;
          call.args_end = v.end;
          call.args_started = true;
          call.args_done = v.complete;
        }
        if (!v.complete) return s;
        p = skip_ws(t, v.end);
        if (p >= t.size()) return s;
        if (t[p] == ',') {
          p = skip_ws(t, p + 1);
          continue;
        }
        if (t[p] == '}') {
          ++p;
          break;
        }
        s.valid = false;
        return s;
      }
    }
    p = skip_ws(t, p);
    if (p >= t.size()) return s;
    if (t[p] == ']') {
      s.closed = true;
      if (skip_ws(t, p + 1) != t.size()) s.valid = false;
      return s;
    }
    if (t[p] != ',') {
      s.valid = false;
      return s;
    }
    p = skip_ws(t, p + 1);
  }
  return s;
}

std::string make_tool_call_id() {
  toolcall::ToolCallIdGenerator ids(toolcall::ToolCallIdStyle::kOpenAI, toolcall::random_seed());
  return ids.next();
}

std::optional<std::vector<ToolCall>> parse_required_calls(std::string_view text) {
  RequiredCallsScan s = scan_required_calls(text);
  if (!s.valid || !s.closed || s.calls.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const RequiredCallsScan::Call& c : s.calls) {
    if (!c.name_done || c.name.empty()) return std::nullopt;
    std::string args = "{}";  // vLLM: a call without parameters has arguments "{}"
    if (c.args_started) {
      if (!c.args_done) return std::nullopt;
      args = std::string(text.substr(c.args_begin, c.args_end - c.args_begin));
      if (!parse_json(args).ok()) return std::nullopt;
    }
    calls.push_back(ToolCall{make_tool_call_id(), c.name, std::move(args)});
  }
  return calls;
}

ForcedToolCallStream::ForcedToolCallStream(std::string named_function) : named_(std::move(named_function)) {}

std::vector<ToolCallDelta> ForcedToolCallStream::add(std::string_view delta, std::string* fallback_content) {
  std::vector<ToolCallDelta> out;
  if (fallback_) {
    fallback_content->append(delta);
    return out;
  }
  if (!named_.empty()) {
    // Named mode: every byte is the one call's arguments.
    if (delta.empty()) return out;
    ToolCallDelta d;
    d.index = 0;
    if (announced_.empty()) {
      announced_.push_back(true);
      ids_.push_back(make_tool_call_id());
      d.id = ids_[0];
      d.name = named_;
    }
    d.arguments = std::string(delta);
    out.push_back(std::move(d));
    return out;
  }
  text_.append(delta);
  RequiredCallsScan s = scan_required_calls(text_);
  if (!s.valid && announced_.empty()) {
    // Not calls at all (no grammar behind it): hand the text on as content from here on.
    fallback_ = true;
    fallback_content->append(text_);
    text_.clear();
    return out;
  }
  for (size_t i = 0; i < s.calls.size(); ++i) {
    const RequiredCallsScan::Call& c = s.calls[i];
    if (i == announced_.size()) {
      if (!c.name_done) break;  // calls are announced in order, once named
      announced_.push_back(true);
      ids_.push_back(make_tool_call_id());
      sent_.push_back(0);
      ToolCallDelta d;
      d.index = static_cast<int>(i);
      d.id = ids_[i];
      d.name = c.name;
      out.push_back(std::move(d));
    }
    if (!c.args_started) continue;
    const size_t have = c.args_end - c.args_begin;
    if (have <= sent_[i]) continue;
    std::string piece = text_.substr(c.args_begin + sent_[i], have - sent_[i]);
    sent_[i] = have;
    if (!out.empty() && out.back().index == static_cast<int>(i)) {
      out.back().arguments += piece;
    } else {
      ToolCallDelta d;
      d.index = static_cast<int>(i);
      d.arguments = std::move(piece);
      out.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace kvasir::server
