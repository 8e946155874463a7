#include "server/http_parser.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

namespace kvasir::http {
namespace {

// RFC 9110 tchar: the characters of methods, header names and transfer codings.
bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(c); });
}

// Field values: visible ASCII, SP, HTAB and obs-text; no other control byte (NUL, CR, LF, DEL).
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

bool is_ows(char c) { return c == ' ' || c == '\t'; }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

// Calls fn(element) for each non-empty element of a comma-separated list, OWS trimmed.
template <typename Fn>
void for_each_element(std::string_view list, Fn fn) {
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view element = trim_ows(list.substr(0, comma));
    if (!element.empty()) fn(element);
    if (comma == std::string_view::npos) return;
    list.remove_prefix(comma + 1);
  }
}

// Splits the request-target into path and query; absolute-form loses scheme and authority.
void split_target(Request& r) {
  std::string_view t = r.target;
  if (t.front() != '/' && t != "*") {
    const size_t scheme_end = t.find("://");
    if (scheme_end != std::string_view::npos) {
      t.remove_prefix(scheme_end + 3);
      const size_t slash = t.find_first_of("/?");
      t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
    }
  }
  const size_t q = t.find('?');
  const std::string_view path = t.substr(0, q);
  r.path = path.empty() ? std::string(1, '/') : std::string(path);
  r.query = q == std::string_view::npos ? std::string() : std::string(t.substr(q + 1));
}

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

// Decimal or hex digits into a value that saturates instead of overflowing.
uint64_t accumulate(uint64_t value, unsigned base, unsigned digit) {
  if (value > (kSaturated - digit) / base) return kSaturated;
  return value * base + digit;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RequestParser::RequestParser(const ParserLimits& limits) : limits_(limits) {}

void RequestParser::reset() {
  phase_ = Phase::kRequestLine;
  line_.clear();
  head_bytes_ = 0;
  num_fields_ = 0;
  remaining_ = 0;
  started_ = false;
  headers_done_ = false;
  keep_alive_ = false;
  expect_continue_ = false;
  saw_cr_ = false;
  error_status_ = 0;
  error_message_.clear();
  request_ = Request();
}

Request RequestParser::take_request() {
  Request r = std::move(request_);
  reset();
  return r;
}

bool RequestParser::expects_continue() const {
  return expect_continue_ && phase_ != Phase::kComplete && phase_ != Phase::kError;
}

void RequestParser::fail(int status, std::string message) {
  phase_ = Phase::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

bool RequestParser::take_line(const char** p, const char* end, size_t max_bytes, int over_status) {
  const auto* nl = static_cast<const char*>(std::memchr(*p, '\n', end - *p));
  const size_t n = static_cast<size_t>((nl ? nl + 1 : end) - *p);
  if (line_.size() + n > max_bytes) {
    // Keep one byte past the bound so the request line can still be classified.
    const size_t keep = std::min(n, max_bytes + 1 - std::min(max_bytes + 1, line_.size()));
    line_.append(*p, keep);
    *p += keep;
    fail(phase_ == Phase::kRequestLine ? classify_long_request_line() : over_status,
         "line too long");
    return false;
  }
  line_.append(*p, n);
  *p += n;
  if (!nl) return false;
  if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
    fail(400, "line not terminated by CRLF");
    return false;
  }
  line_.resize(line_.size() - 2);
  return true;
}

// A request line that outgrew its bound: a long target is 414, a long head 431, junk 400.
int RequestParser::classify_long_request_line() const {
  const std::string_view line = line_;
  const size_t sp1 = line.find(' ');
  if (sp1 != std::string_view::npos && sp1 <= kMaxMethodBytes) {
    const size_t sp2 = line.find(' ', sp1 + 1);
    const size_t target_end = sp2 == std::string_view::npos ? line.size() : sp2;
    if (target_end - sp1 - 1 > limits_.max_uri_bytes) return 414;
  }
  return head_bytes_ + line.size() > limits_.max_header_bytes ? 431 : 400;
}

RequestParser::Result RequestParser::feed(std::string_view data, size_t* consumed) {
  const char* p = data.data();
  const char* const end = p + data.size();
  if (p != end && phase_ != Phase::kComplete && phase_ != Phase::kError) started_ = true;
  while (p != end && phase_ != Phase::kComplete && phase_ != Phase::kError) {
    const size_t head_budget =
        limits_.max_header_bytes - std::min(limits_.max_header_bytes, head_bytes_);
    switch (phase_) {
      case Phase::kRequestLine: {
        // The longest acceptable request line: "METHOD SP target SP HTTP/1.1 CRLF".
        const size_t line_bound = kMaxMethodBytes + 1 + limits_.max_uri_bytes + 1 + 8 + 2;
        if (!take_line(&p, end, std::min(head_budget, line_bound), 431)) break;
        head_bytes_ += line_.size() + 2;
        if (!line_.empty()) on_request_line();  // empty lines before a request are ignored
        line_.clear();
        break;
      }
      case Phase::kHeaders:
      case Phase::kTrailers: {
        const bool trailer = phase_ == Phase::kTrailers;
        if (!take_line(&p, end, head_budget, 431)) break;
        head_bytes_ += line_.size() + 2;
        if (line_.empty()) {
          trailer ? complete() : on_headers_done();
        } else {
          on_header_line(trailer);
        }
        line_.clear();
        break;
      }
      case Phase::kBody:
      case Phase::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, end - p));
        std::string& body = request_.body;
        if (phase_ == Phase::kBody && body.size() + n > body.capacity()) {
          // Past the first reservation the client is really sending: the declared length is
          // reserved at once, so a big body is never held twice while its buffer doubles.
          body.reserve(body.size() + static_cast<size_t>(remaining_));
        }
        body.append(p, n);
        p += n;
        remaining_ -= n;
        if (remaining_ == 0) {
          if (phase_ == Phase::kBody) {
            complete();
          } else {
            phase_ = Phase::kChunkDataEnd;
          }
        }
        break;
      }
      case Phase::kChunkSize:
        if (!take_line(&p, end, kMaxChunkLineBytes, 400)) break;
        on_chunk_size_line();
        line_.clear();
        break;
      case Phase::kChunkDataEnd: {
        const char c = *p++;
        if (!saw_cr_ && c == '\r') {
          saw_cr_ = true;
        } else if (saw_cr_ && c == '\n') {
          saw_cr_ = false;
          phase_ = Phase::kChunkSize;
        } else {
          fail(400, "chunk data not followed by CRLF");
        }
        break;
      }
      case Phase::kComplete:
      case Phase::kError: break;
    }
  }
  *consumed = static_cast<size_t>(p - data.data());
  if (phase_ == Phase::kComplete) return Result::kComplete;
  if (phase_ == Phase::kError) return Result::kError;
  return Result::kNeedMore;
}

void RequestParser::on_request_line() {
  const std::string_view line = line_;
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return fail(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  if (method.size() > kMaxMethodBytes || !is_token(method)) return fail(400, "invalid method");
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return fail(400, "malformed request line");
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty()) return fail(400, "empty request-target");
  if (target.size() > limits_.max_uri_bytes) return fail(414, "request-target too long");
  for (char ch : target) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return fail(400, "invalid byte in request-target");
  }
  const std::string_view version = line.substr(sp2 + 1);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(400, "malformed HTTP version");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return fail(505, "HTTP version not supported");
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.version_minor = version[7] - '0';
  split_target(request_);
  phase_ = Phase::kHeaders;
}

void RequestParser::on_header_line(bool trailer) {
  const std::string_view line = line_;
  // A leading space is obs-fold (or whitespace after the request line): both are smuggling aids.
  if (is_ows(line.front())) return fail(400, "obsolete line folding");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail(400, "header line without colon");
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) return fail(400, "invalid header name");
  const std::string_view value = trim_ows(line.substr(colon + 1));
  if (!is_field_value(value)) return fail(400, "invalid byte in header value");
  if (++num_fields_ > limits_.max_header_count) return fail(431, "too many header fields");
  if (trailer) return;  // trailers are framing only; nothing downstream reads them
  std::string lower(name);
  for (char& c : lower) c = to_lower(c);
  request_.headers.emplace_back(std::move(lower), std::string(value));
}

void RequestParser::on_headers_done() {
  headers_done_ = true;
  const bool http11 = request_.version_minor == 1;
  bool close = false;
  bool keep = false;
  bool chunked = false;
  bool other_coding = false;
  int num_codings = 0;
  int num_host = 0;
  bool te_invalid = false;
  bool have_length = false;
  bool length_conflict = false;
  bool length_invalid = false;
  uint64_t length = 0;
  for (const auto& [name, value] : request_.headers) {
    if (name == "connection") {
      for_each_element(value, [&](std::string_view token) {
        close |= iequals(token, "close");
        keep |= iequals(token, "keep-alive");
      });
    } else if (name == "host") {
      ++num_host;
    } else if (name == "transfer-encoding") {
      int n = 0;
      for_each_element(value, [&](std::string_view coding) {
        ++n;
        if (iequals(coding, "chunked")) {
          te_invalid |= chunked;  // chunked may appear once only
          chunked = true;
        } else {
          other_coding = true;  // gzip, identity, "chunked;param", ...
        }
      });
      num_codings += n;
      te_invalid |= n == 0;
    } else if (name == "content-length") {
      // A list of equal values ("5, 5") is what a proxy makes of duplicates: accept it.
      int n = 0;
      for_each_element(value, [&](std::string_view digits) {
        ++n;
        uint64_t v = 0;
        for (char c : digits) {
          if (c < '0' || c > '9') {
            length_invalid = true;
            return;
          }
          v = accumulate(v, 10, static_cast<unsigned>(c - '0'));
        }
        if (have_length && v != length) length_conflict = true;
        have_length = true;
        length = v;
      });
      length_invalid |= n == 0;
    } else if (name == "expect") {
      expect_continue_ = iequals(trim_ows(value), "100-continue");
    }
  }
  keep_alive_ = http11 ? !close : (keep && !close);
  if (num_host > 1) return fail(400, "multiple Host headers");
  // Transfer-Encoding next to Content-Length, or on HTTP/1.0, is a framing conflict (smuggling).
  const bool has_te = num_codings > 0 || te_invalid;
  if (has_te && (have_length || length_invalid || !http11)) {
    return fail(400, "Transfer-Encoding with Content-Length or on HTTP/1.0");
  }
  if (te_invalid) return fail(400, "malformed Transfer-Encoding");
  if (other_coding) return fail(501, "unsupported transfer coding");
  if (length_invalid) return fail(400, "invalid Content-Length");
  if (length_conflict) return fail(400, "conflicting Content-Length values");
  // RFC 9112 3.2: an HTTP/1.1 request without Host must be refused (after the framing checks,
  // so a smuggling attempt is still named as such).
  if (http11 && num_host == 0) return fail(400, "missing Host header");
  expect_continue_ = expect_continue_ && http11;
  if (chunked) {
    phase_ = Phase::kChunkSize;
    return;
  }
  if (!have_length) {
    expect_continue_ = false;
    return complete();
  }
  set_body_length(length);
}

void RequestParser::set_body_length(uint64_t length) {
  if (length > limits_.max_body_bytes) return fail(413, "body too large");
  remaining_ = length;
  if (length == 0) {
    expect_continue_ = false;
    return complete();
  }
  request_.body.reserve(static_cast<size_t>(std::min<uint64_t>(length, 1 << 20)));
  phase_ = Phase::kBody;
}

void RequestParser::on_chunk_size_line() {
  const std::string_view line = line_;
  size_t i = 0;
  uint64_t size = 0;
  for (; i < line.size() && hex_digit(line[i]) >= 0; ++i) {
    size = accumulate(size, 16, static_cast<unsigned>(hex_digit(line[i])));
  }
  if (i == 0) return fail(400, "invalid chunk size");
  std::string_view rest = line.substr(i);
  while (!rest.empty() && is_ows(rest.front())) rest.remove_prefix(1);
  if (!rest.empty() && (rest.front() != ';' || !is_field_value(rest))) {
    return fail(400, "invalid chunk extension");
  }
  if (size == 0) {
    phase_ = Phase::kTrailers;
    return;
  }
  if (size > limits_.max_body_bytes - std::min(limits_.max_body_bytes, request_.body.size())) {
    return fail(413, "body too large");
  }
  remaining_ = size;
  phase_ = Phase::kChunkData;
}

void RequestParser::complete() {
  phase_ = Phase::kComplete;
  expect_continue_ = false;
}

}  // namespace kvasir::http
