#include "toolcall/stream_tool_parser.h"

#include "common/check.h"
#include "common/utf8.h"
#include "common/text_match.h"

namespace kvasir::toolcall {

StreamDelta StreamToolParser::feed(std::string_view delta) {
  KVASIR_CHECK_MSG(!finished_, "ToolParser::feed after finish");
  buf_.erase(0, pos_);
  offset_ += pos_;
  pos_ = 0;
  buf_.append(delta);
  avail_ = utf8_complete_prefix(buf_);
  run();
  return out_.take();
}

StreamDelta StreamToolParser::finish() {
  KVASIR_CHECK_MSG(!finished_, "ToolParser::finish called twice");
  finished_ = true;
  eof_ = true;
  avail_ = buf_.size();
  run();
  if (!passthrough_) {
    if (in_call_) {  // generation stopped inside a call's arguments
      broken_ = true;
      broken_offset_ = section_offset_;
      in_call_ = false;
    }
    if (in_section_) close_section();
    emit_content(rest().size());
  }
  out_.finish();
  return out_.take();
}

void StreamToolParser::run() {
  if (!passthrough_) parse();
  if (passthrough_) emit_content(rest().size());
}

void StreamToolParser::consume(size_t n) {
  if (in_section_ && section_calls_ == 0) section_raw_.append(rest().substr(0, n));
  pos_ += n;
}

bool StreamToolParser::skip_spaces() {
  consume(count_spaces(rest()));
  return !rest().empty();
}

void StreamToolParser::emit_content(size_t n) {
  out_.content(rest().substr(0, n));
  pos_ += n;
}

void StreamToolParser::open_section() {
  KVASIR_CHECK(!in_section_);
  in_section_ = true;
  section_calls_ = 0;
  section_offset_ = offset_ + pos_;
  section_raw_.clear();
}

void StreamToolParser::close_section() {
  KVASIR_CHECK(in_section_ && !in_call_);
  in_section_ = false;
  if (section_calls_ == 0) {
    out_.content(section_raw_);
  } else {
    out_.after_calls();
  }
  section_raw_.clear();
}

void StreamToolParser::begin_call(std::string_view name) {
  KVASIR_CHECK(in_section_ && !in_call_);
  out_.begin_call(name);
  in_call_ = true;
  ++section_calls_;
  section_raw_.clear();
}

int StreamToolParser::open_section_at(std::initializer_list<std::string_view> markers) {
  MarkerFind f = find_marker(rest(), markers, at_eof());
  emit_content(f.content_end);
  if (f.which < 0) return -1;
  open_section();
  consume(markers.begin()[f.which].size());
  return f.which;
}

bool StreamToolParser::open_leading_section(std::string_view start_tag, char open) {
  emit_content(count_spaces(rest()));
  std::string_view in = rest();
  if (in.empty()) return false;
  Prefix p = match_prefix(in, start_tag, at_eof());
  if (p == Prefix::kPartial) return false;
  if (p == Prefix::kNo && in[0] != open) {  // not a call: all content
    fail();
    return false;
  }
  open_section();
  if (p == Prefix::kFull) consume(start_tag.size());
  return true;
}

bool StreamToolParser::expect(char c) {
  if (!skip_spaces()) return false;
  if (rest()[0] == c) return true;
  fail();
  return false;
}

bool StreamToolParser::read_call(JsonCallReader& reader) {
  JsonCallReader::Events ev;
  size_t n = 0;
  JsonCallReader::State s = reader.feed(rest(), &n, &ev);
  consume(n);
  if (ev.begin) begin_call(ev.name);
  call_arguments(ev.args);
  if (ev.end) end_call();
  if (s == JsonCallReader::State::kError) fail();
  return s == JsonCallReader::State::kDone;
}

bool StreamToolParser::read_call_arguments(std::string_view name, JsonScanner& scanner) {
  if (!in_call_) {
    if (!expect('{')) return false;
    begin_call(name);
    scanner.reset();
  }
  size_t n = 0;
  JsonScanner::State s = scanner.feed(rest(), &n);
  call_arguments(rest().substr(0, n));
  consume(n);
  if (s == JsonScanner::State::kError) fail();
  return s == JsonScanner::State::kDone;
}

void StreamToolParser::fail() {
  if (in_section_ && section_calls_ > 0) {
    broken_ = true;
    broken_offset_ = section_offset_;
  } else if (in_section_) {
    out_.content(section_raw_);
  }
  in_section_ = false;
  in_call_ = false;
  section_raw_.clear();
  passthrough_ = true;
}

ParsedToolCalls StreamToolParser::parse_complete(std::string_view model_output) {
  auto run_whole = [this](std::string_view text, bool* broken, uint64_t* cut) {
    std::unique_ptr<StreamToolParser> p = fresh(seeds_.next_u64());
    ParsedToolCalls r;
    append_delta(r, p->feed(text));
    append_delta(r, p->finish());
    *broken = p->broken_;
    *cut = p->broken_offset_;
    return r;
  };
  bool broken = false;
  uint64_t cut = 0;
  ParsedToolCalls r = run_whole(model_output, &broken, &cut);
  if (!broken) return r;
  // A call broke after it began: everything from its section on is content. The text before the
  // section parses the same on its own (its sections all ended before the cut).
  uint64_t section = cut;
  r = run_whole(model_output.substr(0, section), &broken, &cut);
  if (broken) {  // cannot happen; never return half a call
    r = ParsedToolCalls();
    section = 0;
  }
  r.content.append(model_output.substr(section));
  return r;
}

}  // namespace kvasir::toolcall
