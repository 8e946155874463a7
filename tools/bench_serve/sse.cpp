#include "bench_serve/sse.h"

namespace kvasir::bench {

void SseSplitter::reset() {
  line_.clear();
  after_cr_ = false;
  has_data_ = false;
  current_ = {};
}

void SseSplitter::on_line(std::vector<SseEvent> *out) {
  if (line_.empty()) {
    if (has_data_)
      out->push_back(std::move(current_));
    current_ = {};
    has_data_ = false;
    return;
  }
  if (line_[0] == ':')
    return; // comment
  std::string_view l = line_;
  const size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos
                               ? std::string_view()
                               : l.substr(colon + 1);
  if (!value.empty() && value[0] == ' ')
    value.remove_prefix(1);
  if (field == "data") {
    if (has_data_)
      current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event.assign(value);
  }
}

void SseSplitter::feed(std::string_view bytes, std::vector<SseEvent> *out) {
  for (char c : bytes) {
    if (c == '\n' && after_cr_) {
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      on_line(out);
      line_.clear();
    } else if (line_.size() < kMaxLineBytes) {
      line_.push_back(c);
    }
  }
}

} // namespace kvasir::bench
