// StreamToolParser: the machinery every format shares, so a format file only says how its text is
// shaped. It buffers input (never showing a parser half a UTF-8 character), keeps the raw text of
// a tool-call section until its first call begins (so a section that turns out not to be a call
// goes back to content verbatim), switches to pass-through after a failure, resolves what is left
// at finish(), and builds parse_complete from the stream (see tool_parser.h for the divergence).
//
// A format implements parse(): consume as much of rest() as can be decided now, calling
// emit_content / open_section / begin_call / call_arguments / end_call / close_section / fail, or
// the shared steps built on them (open_section_at, expect, read_call, read_call_arguments, ...).
// It returns when it needs more text; at_eof() means no more will come.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "toolcall/delta_builder.h"
#include "toolcall/json_call_reader.h"
#include "toolcall/json_scanner.h"
#include "toolcall/tool_parser.h"

namespace kvasir::toolcall {

class StreamToolParser : public ToolParser {
 public:
  const ToolParserInfo& info() const final { return info_; }
  StreamDelta feed(std::string_view delta) final;
  StreamDelta finish() final;
  size_t num_tool_calls() const final { return out_.num_calls(); }
  bool stream_broken() const final { return broken_; }
  ParsedToolCalls parse_complete(std::string_view model_output) final;

 protected:
  // `info` is the format's constant (static storage: it is kept by reference).
  StreamToolParser(const ToolParserInfo& info, ToolCallIdStyle style, uint64_t seed)
      : info_(info), out_(style, seed), seeds_(style, seed ^ 0x5EED) {}
  // A parser of the same format in its initial state.
  virtual std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const = 0;
  virtual void parse() = 0;

  std::string_view rest() const { return std::string_view(buf_).substr(pos_, avail_ - pos_); }
  bool at_eof() const { return eof_; }
  void consume(size_t n);
  // Consumes leading whitespace of rest(); true when a byte follows it (false: parse() returns to
  // wait for more text).
  bool skip_spaces();
  void emit_content(size_t n);       // rest()[0, n) is content (outside any section)
  void open_section();               // a tool-call section starts at the cursor
  void close_section();              // it ended (without calls: its text was content after all)
  void begin_call(std::string_view name);
  void call_arguments(std::string_view piece) { out_.arguments(piece); }
  void end_call() { in_call_ = false; }
  // The text stopped making sense. Before the section's first call: the section's text is content.
  // After it: the stream is broken there. Either way the rest of the output is content; parse()
  // must return right after.
  void fail();

  // The steps the formats share. Each returning bool says false when parse() must return: more
  // text is needed, or the text broke the format and fail() was called.
  //
  // Text up to the earliest of `markers` is content; at a marker a tool-call section opens after
  // it. Returns the marker's index, or -1 when none is complete yet.
  int open_section_at(std::initializer_list<std::string_view> markers);
  // For formats whose calls must open the output: leading whitespace (held back as content, so
  // dropped if a call follows), then optionally `start_tag`, then `open` must come; anything else
  // makes the whole output content. True once the section is open (the tag consumed, `open` not).
  bool open_leading_section(std::string_view start_tag, char open);
  // After whitespace, `c` must come next (it is not consumed).
  bool expect(char c);
  // Feeds rest() to `reader` (positioned in a call object) and applies the call events it read.
  // True once the object is complete.
  bool read_call(JsonCallReader& reader);
  // A call named `name` whose arguments are a bare JSON object: after whitespace a '{' must come,
  // the call begins there, and its arguments stream through `scanner`. True once the arguments
  // object is complete (the call is still open: end_call() it).
  bool read_call_arguments(std::string_view name, JsonScanner& scanner);
  bool in_section() const { return in_section_; }
  size_t section_calls() const { return section_calls_; }

 private:
  void run();

  const ToolParserInfo& info_;
  DeltaBuilder out_;
  ToolCallIdGenerator seeds_;  // seeds for parse_complete's fresh parsers
  std::string buf_;
  size_t pos_ = 0;             // consumed bytes of buf_
  size_t avail_ = 0;           // bytes of buf_ the parser may see (complete UTF-8 characters)
  uint64_t offset_ = 0;        // stream offset of buf_[0]
  bool eof_ = false;
  bool finished_ = false;
  bool passthrough_ = false;
  bool in_section_ = false;
  bool in_call_ = false;
  size_t section_calls_ = 0;
  uint64_t section_offset_ = 0;
  std::string section_raw_;    // the section's text until its first call begins
  bool broken_ = false;
  uint64_t broken_offset_ = 0;  // where the broken section began
};

}  // namespace kvasir::toolcall
