// Test-only: a recorded output must give the expected split whole and streamed in any pieces
// (common/stream_splits_test_util.h: 1 byte, random sizes, every split point in two).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/stream_splits_test_util.h"
#include "common/utf8.h"
#include "reasoning/reasoning_parser.h"

namespace kvasir::reasoning_test {

inline std::unique_ptr<ReasoningParser> make(std::string_view name, const ReasoningParserOptions& options = {}) {
  auto p = make_reasoning_parser(name, options);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(p).value();
}

inline void expect_split(std::string_view name, std::string_view text, const ReasoningResult& want,
                         const ReasoningParserOptions& options = {}) {
  auto p = make(name, options);
  ReasoningResult whole = p->parse_complete(text);
  EXPECT_EQ(whole.reasoning, want.reasoning) << "complete: " << text;
  EXPECT_EQ(whole.content, want.content) << "complete: " << text;
  for (const auto& cuts : stream_splits(text)) {
    auto s = make(name, options);
    ReasoningResult got;
    size_t prev = 0;
    bool ended = false;
    auto take = [&](const ReasoningDelta& d) {
      if (utf8_valid(text)) {
        EXPECT_TRUE(utf8_valid(d.reasoning) && utf8_valid(d.content)) << "a piece splits a character";
      }
      if (!d.content.empty()) {
        EXPECT_TRUE(s->reasoning_ended()) << "content before reasoning ended";
      }
      EXPECT_FALSE(ended && !d.reasoning.empty()) << "reasoning after it ended";
      ended = s->reasoning_ended();
      got.reasoning += d.reasoning;
      got.content += d.content;
    };
    for (size_t cut : cuts) {
      take(s->feed(text.substr(prev, cut - prev)));
      EXPECT_EQ(s->reasoning_ended(), p->is_reasoning_end(text.substr(0, cut)));
      prev = cut;
    }
    take(s->feed(text.substr(prev)));
    take(s->finish());
    EXPECT_EQ(got.reasoning, want.reasoning) << "streamed in " << cuts.size() + 1 << " pieces";
    EXPECT_EQ(got.content, want.content) << "streamed in " << cuts.size() + 1 << " pieces";
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace kvasir::reasoning_test
