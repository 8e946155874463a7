#include "bench_serve/http_response_parser.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace kvasir::bench {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// The last comma-separated token of a list header ("gzip, chunked" ->
// "chunked").
std::string_view last_token(std::string_view v) {
  const size_t comma = v.rfind(',');
  return trim(comma == std::string_view::npos ? v : v.substr(comma + 1));
}

} // namespace

std::optional<std::string> ResponseParser::header(std::string_view name) const {
  for (const auto &[k, v] : headers_) {
    if (iequals(k, name))
      return v;
  }
  return std::nullopt;
}

ResponseParser::Result ResponseParser::fail(std::string message) {
  phase_ = Phase::kError;
  error_ = std::move(message);
  return Result::kError;
}

bool ResponseParser::take_line(const char **p, const char *end) {
  const char *nl = static_cast<const char *>(
      std::memchr(*p, '\n', static_cast<size_t>(end - *p)));
  const char *stop = nl ? nl : end;
  line_.append(*p, stop);
  *p = nl ? nl + 1 : end;
  if (line_.size() > kMaxLineBytes) {
    fail("response line longer than " + std::to_string(kMaxLineBytes) +
         " bytes");
    return false;
  }
  if (!nl)
    return false;
  if (!line_.empty() && line_.back() == '\r')
    line_.pop_back();
  return true;
}

bool ResponseParser::on_status_line() {
  // "HTTP/1.1 200 OK": the reason phrase may be empty or absent.
  std::string_view l = line_;
  if (l.size() < 12 || l.compare(0, 7, "HTTP/1.") != 0 || l[8] != ' ' ||
      !std::isdigit(static_cast<unsigned char>(l[9])) ||
      !std::isdigit(static_cast<unsigned char>(l[10])) ||
      !std::isdigit(static_cast<unsigned char>(l[11])) ||
      (l.size() > 12 && l[12] != ' ')) {
    fail("bad status line: " + std::string(l.substr(0, 80)));
    return false;
  }
  status_ = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
  headers_.clear();
  phase_ = Phase::kHeaders;
  return true;
}

bool ResponseParser::on_header_line() {
  const size_t colon = line_.find(':');
  if (colon == std::string::npos || colon == 0) {
    fail("bad header line: " + line_.substr(0, 80));
    return false;
  }
  headers_.emplace_back(
      line_.substr(0, colon),
      std::string(trim(std::string_view(line_).substr(colon + 1))));
  return true;
}

bool ResponseParser::on_headers_done() {
  if (status_ >= 100 &&
      status_ < 200) { // interim response (100 Continue): the real one follows
    phase_ = Phase::kStatusLine;
    return true;
  }
  headers_done_ = true;
  if (head_response_ || status_ == 204 || status_ == 304) {
    phase_ = Phase::kComplete;
    return true;
  }
  if (auto te = header("Transfer-Encoding")) {
    // RFC 9112 6.3: chunked must be the final coding; anything else is read
    // until close.
    chunked_ = iequals(last_token(*te), "chunked");
    phase_ = chunked_ ? Phase::kChunkSize : Phase::kUntilClose;
    return true;
  }
  if (auto cl = header("Content-Length")) {
    uint64_t n = 0;
    if (cl->empty() || cl->size() > 18 ||
        !std::all_of(cl->begin(), cl->end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      fail("bad Content-Length: " + cl->substr(0, 40));
      return false;
    }
    for (char c : *cl)
      n = n * 10 + static_cast<uint64_t>(c - '0');
    remaining_ = n;
    phase_ = n == 0 ? Phase::kComplete : Phase::kBody;
    return true;
  }
  phase_ = Phase::kUntilClose;
  return true;
}

bool ResponseParser::on_chunk_size_line() {
  std::string_view l = line_;
  l = trim(l.substr(0, l.find(';'))); // chunk extensions carry nothing we need
  if (l.empty() || l.size() > 15) {
    fail("bad chunk size line: " + line_.substr(0, 40));
    return false;
  }
  uint64_t n = 0;
  for (char c : l) {
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    if (d < 0) {
      fail("bad chunk size line: " + line_.substr(0, 40));
      return false;
    }
    n = n * 16 + static_cast<uint64_t>(d);
  }
  remaining_ = n;
  phase_ = n == 0 ? Phase::kTrailers : Phase::kChunkData;
  return true;
}

ResponseParser::Result ResponseParser::feed(std::string_view data,
                                            std::string *body) {
  const char *p = data.data();
  const char *end = p + data.size();
  while (p < end) {
    switch (phase_) {
    case Phase::kComplete:
      return Result::kComplete;
    case Phase::kError:
      return Result::kError;
    case Phase::kStatusLine:
      if (!take_line(&p, end))
        break;
      if (line_.empty())
        continue; // tolerate a stray CRLF before the status line
      if (!on_status_line())
        return Result::kError;
      line_.clear();
      break;
    case Phase::kHeaders:
      if (!take_line(&p, end))
        break;
      if (line_.empty() ? !on_headers_done() : !on_header_line())
        return Result::kError;
      line_.clear();
      break;
    case Phase::kBody:
    case Phase::kChunkData: {
      const size_t n = static_cast<size_t>(
          std::min<uint64_t>(remaining_, static_cast<uint64_t>(end - p)));
      body->append(p, n);
      p += n;
      remaining_ -= n;
      if (remaining_ == 0)
        phase_ =
            phase_ == Phase::kBody ? Phase::kComplete : Phase::kChunkDataEnd;
      break;
    }
    case Phase::kUntilClose:
      body->append(p, end);
      p = end;
      break;
    case Phase::kChunkDataEnd:
      if (!take_line(&p, end))
        break;
      if (!line_.empty())
        return fail("chunk data longer than its size");
      phase_ = Phase::kChunkSize;
      break;
    case Phase::kChunkSize:
      if (!take_line(&p, end))
        break;
      if (!on_chunk_size_line())
        return Result::kError;
      line_.clear();
      break;
    case Phase::kTrailers:
      if (!take_line(&p, end))
        break;
      if (line_.empty())
        phase_ = Phase::kComplete;
      line_.clear();
      break;
    }
    if (phase_ == Phase::kError)
      return Result::kError;
  }
  if (phase_ == Phase::kError)
    return Result::kError;
  return phase_ == Phase::kComplete ? Result::kComplete : Result::kNeedMore;
}

ResponseParser::Result ResponseParser::finish() {
  if (phase_ == Phase::kComplete)
    return Result::kComplete;
  if (phase_ == Phase::kUntilClose) {
    phase_ = Phase::kComplete;
    return Result::kComplete;
  }
  if (phase_ == Phase::kError)
    return Result::kError;
  return fail(headers_done_ ? "connection closed before the end of the body"
                            : "connection closed before a response");
}

} // namespace kvasir::bench
