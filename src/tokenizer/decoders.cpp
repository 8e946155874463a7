#include "tokenizer/decoders.h"

#include "common/quoted_text.h"
#include "tokenizer/unicode_util.h"

namespace kvasir::tok {
namespace {

// "<0xNN>" -> NN, else -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    size_t mark = bytes.size();
    bool all_mapped = true;
    for (size_t i = 0; i < t.size();) {
      size_t n = 0;
      int b = unicode_to_byte(first_code_point(std::string_view(t).substr(i), &n));
      if (b < 0) {
        all_mapped = false;
        break;
      }
      bytes += static_cast<char>(b);
      i += n;
    }
    if (!all_mapped) {  // not a byte-level token (e.g. an added token): its text as is
      bytes.resize(mark);
      bytes += t;
    }
  }
  tokens.assign(1, utf8_lossy(bytes));
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string group;
  auto flush = [&] {
    if (group.empty()) return;
    if (utf8_lossy(group) == group) {
      out.push_back(group);
    } else {  // HF: an invalid group becomes one U+FFFD per byte
      for (size_t i = 0; i < group.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    group.clear();
  };
  for (std::string& t : tokens) {
    int b = parse_byte_token(t);
    if (b >= 0) {
      group += static_cast<char>(b);
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens.swap(out);
}

void strip(std::vector<std::string>& tokens, const std::string& content, int start, int stop,
           bool keep_first_start) {
  for (size_t k = 0; k < tokens.size(); ++k) {
    std::string_view v(tokens[k]);
    if (!(keep_first_start && k == 0)) {
      for (int i = 0; i < start && !v.empty() && v.substr(0, content.size()) == content; ++i) {
        v.remove_prefix(content.size());
      }
    }
    for (int i = 0; i < stop && v.size() >= content.size() &&
                    v.substr(v.size() - content.size()) == content;
         ++i) {
      v.remove_suffix(content.size());
    }
    tokens[k] = std::string(v);
  }
}

// HF's cleanup of BERT-style spacing around punctuation and English contractions.
void cleanup(std::string& t) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    if (t.find(from) != std::string::npos) t = Pattern::literal(from).replace_all(t, to);
  }
}

}  // namespace

StatusOr<Decoder> Decoder::from_json(const Json& j) {
  Decoder d;
  if (!j.is_null()) {
    d.configured_ = true;
    KVASIR_RETURN_IF_ERROR(d.add_from_json(j));
  }
  return d;
}

void Decoder::add_byte_level() {
  configured_ = true;
  steps_.push_back(Step{Kind::kByteLevel, Pattern{}, ""});
}

void Decoder::add_replace(Pattern pattern, std::string content) {
  configured_ = true;
  steps_.push_back(Step{Kind::kReplace, std::move(pattern), std::move(content)});
}

void Decoder::add_byte_fallback() {
  configured_ = true;
  has_byte_fallback_ = true;
  steps_.push_back(Step{Kind::kByteFallback, Pattern{}, ""});
}

void Decoder::add_fuse() {
  configured_ = true;
  steps_.push_back(Step{Kind::kFuse, Pattern{}, ""});
}

void Decoder::add_strip(std::string content, int start, int stop) {
  configured_ = true;
  Step s{Kind::kStrip, Pattern{}, std::move(content)};
  s.start = start;
  s.stop = stop;
  steps_.push_back(std::move(s));
}

void Decoder::add_cleanup() {
  configured_ = true;
  steps_.push_back(Step{Kind::kCleanup, Pattern{}, ""});
}

Status Decoder::add_from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer decoder must be an object");
  const std::string type = j.get_string("type");
  if (type == "Sequence") {
    const Json* list = j.find("decoders");
    if (list == nullptr || !list->is_array()) return invalid_argument("decoder Sequence needs a list");
    for (const Json& item : list->as_array()) KVASIR_RETURN_IF_ERROR(add_from_json(item));
    return Status();
  }
  if (type == "ByteLevel") {
    add_byte_level();
    return Status();
  }
  if (type == "Replace") {
    const Json* pat = j.find("pattern");
    if (pat == nullptr) return invalid_argument("Replace decoder needs a pattern");
    KVASIR_ASSIGN_OR_RETURN(Pattern p, Pattern::from_json(*pat));
    add_replace(std::move(p), j.get_string("content"));
    return Status();
  }
  if (type == "ByteFallback") {
    add_byte_fallback();
    return Status();
  }
  if (type == "Fuse") {
    add_fuse();
    return Status();
  }
  if (type == "Strip") {
    add_strip(j.get_string("content", " "), static_cast<int>(j.get_int("start", 0)),
              static_cast<int>(j.get_int("stop", 0)));
    return Status();
  }
  if (type == "Metaspace") {
    Step s{Kind::kMetaspace, Pattern{}, j.get_string("replacement", "\xE2\x96\x81")};
    if (const Json* ps = j.find("prepend_scheme"); ps != nullptr && ps->is_string()) {
      s.prepend = ps->as_string() != "never";
    } else {
      s.prepend = j.get_bool("add_prefix_space", true);
    }
    steps_.push_back(std::move(s));
    return Status();
  }
  return unimplemented("tokenizer decoder '" + quoted_text(type) + "' is not supported");
}

std::string Decoder::decode(std::vector<std::string> tokens, bool continuation) const {
  if (!configured_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  // Once the list is a single joined string, its first element is the start of the text.
  bool joined = false;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kByteLevel:
        byte_level(tokens);
        joined = true;
        break;
      case Kind::kReplace:
        for (std::string& t : tokens) t = step.pattern.replace_all(t, step.content);
        break;
      case Kind::kByteFallback:
        byte_fallback(tokens);
        break;
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        joined = true;
        break;
      }
      case Kind::kStrip:
        strip(tokens, step.content, step.start, step.stop, continuation && joined);
        break;
      case Kind::kCleanup:
        for (std::string& t : tokens) cleanup(t);
        break;
      case Kind::kMetaspace:
        for (size_t k = 0; k < tokens.size(); ++k) {
          bool drop = k == 0 && step.prepend && !continuation;
          tokens[k] = Pattern::literal(step.content).replace_all(tokens[k], drop ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string Decoder::token_bytes(std::string token) const {
  bool joined = false;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        for (size_t i = 0; i < token.size();) {
          size_t n = 0;
          int b = unicode_to_byte(first_code_point(std::string_view(token).substr(i), &n));
          if (b < 0) {  // not a byte-level token: its text as is (as byte_level() does)
            bytes = token;
            break;
          }
          bytes += static_cast<char>(b);
          i += n;
        }
        token = std::move(bytes);
        joined = true;
        break;
      }
      case Kind::kReplace:
        token = step.pattern.replace_all(token, step.content);
        break;
      case Kind::kByteFallback:
        if (int b = parse_byte_token(token); b >= 0) token.assign(1, static_cast<char>(b));
        break;
      case Kind::kFuse:
        joined = true;
        break;
      case Kind::kStrip: {
        std::vector<std::string> one{std::move(token)};
        strip(one, step.content, step.start, step.stop, /*keep_first_start=*/joined);
        token = std::move(one[0]);
        break;
      }
      case Kind::kCleanup:
        cleanup(token);
        break;
      case Kind::kMetaspace:
        token = Pattern::literal(step.content).replace_all(token, " ");
        break;
    }
  }
  return token;
}

bool Decoder::per_token() const {
  if (!configured_) return false;
  bool joined = false;
  for (const Step& step : steps_) {
    if (step.kind == Kind::kCleanup) return false;
    if (step.kind == Kind::kStrip && joined && step.stop > 0) return false;
    if (step.kind == Kind::kByteLevel || step.kind == Kind::kFuse) joined = true;
  }
  return true;
}

}  // namespace kvasir::tok
