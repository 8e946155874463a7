// Test-only helpers for the tool-call parser tests: the expected OpenAI result of a recorded model
// output, and the check every format shares - parse_complete gives it, and streaming the same text
// in many splits (common/stream_splits_test_util.h) reassembles to the same thing through deltas
// shaped as OpenAI's.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/stream_splits_test_util.h"
#include "common/utf8.h"
#include "toolcall/tool_parser.h"

namespace kvasir::toolcall_test {

struct ExpectedCall {
  std::string name;
  std::string arguments;  // JSON; compared as JSON values (and as text when exact_arguments)
};
struct Expected {
  std::string content;
  std::vector<ExpectedCall> calls;
  bool exact_arguments = false;  // the arguments text must equal `arguments` byte for byte
};

inline std::unique_ptr<ToolParser> make(std::string_view name) {
  auto p = make_tool_parser(name);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(p).value();
}

// Checks one stream's deltas against OpenAI's streaming shape.
inline void expect_openai_shape(const std::vector<StreamDelta>& deltas, bool valid_utf8_input) {
  std::set<std::string> ids;
  int next_index = 0;
  for (const StreamDelta& d : deltas) {
    if (valid_utf8_input) {
      EXPECT_TRUE(utf8_valid(d.content)) << "content piece splits a character";
    }
    int last_index = -1;
    for (const ToolCallDelta& t : d.tool_calls) {
      EXPECT_GT(t.index, last_index) << "one entry per index, in order";
      last_index = t.index;
      if (valid_utf8_input) {
        EXPECT_TRUE(utf8_valid(t.arguments)) << "arguments piece splits a character";
      }
      Json j = t.to_json();
      const Json* fn = j.find("function");
      ASSERT_NE(fn, nullptr);
      ASSERT_TRUE(fn->find("arguments") && fn->find("arguments")->is_string());
      EXPECT_EQ(j.find("index")->as_int(), t.index);
      if (t.is_first()) {
        EXPECT_EQ(t.index, next_index) << "calls are numbered 0, 1, ... in order";
        next_index = t.index + 1;
        EXPECT_TRUE(ids.insert(t.id).second) << "duplicate id " << t.id;
        EXPECT_FALSE(t.name.empty());
        EXPECT_EQ(j.size(), 4u);
        EXPECT_EQ(j.get_string("type"), "function");
        EXPECT_EQ(j.get_string("id"), t.id);
        EXPECT_EQ(fn->get_string("name"), t.name);
        EXPECT_EQ(fn->size(), 2u);
      } else {
        EXPECT_LT(t.index, next_index) << "arguments for a call that has not started";
        EXPECT_TRUE(t.name.empty());
        EXPECT_FALSE(t.arguments.empty()) << "empty continuation delta";
        EXPECT_EQ(j.size(), 2u);
        EXPECT_EQ(fn->size(), 1u);
      }
    }
  }
}

inline void expect_result(const ParsedToolCalls& got, const Expected& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.tool_calls.size(), want.calls.size()) << where;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    const ToolCall& c = got.tool_calls[i];
    EXPECT_EQ(c.name, want.calls[i].name) << where << " call " << i;
    auto a = parse_json(c.arguments);
    ASSERT_TRUE(a.ok()) << where << " call " << i << " arguments are not JSON: " << c.arguments;
    EXPECT_TRUE(a->is_object()) << where;
    auto w = parse_json(want.calls[i].arguments);
    ASSERT_TRUE(w.ok()) << "bad test expectation: " << want.calls[i].arguments;
    EXPECT_EQ(*a, *w) << where << " call " << i << ": " << c.arguments;
    if (want.exact_arguments) {
      EXPECT_EQ(c.arguments, want.calls[i].arguments) << where;
    }
  }
}

// Feeds `text` split at `cuts` (ascending offsets) into a fresh parser.
inline ParsedToolCalls stream_split(std::string_view parser, std::string_view text, const std::vector<size_t>& cuts,
                                    bool* broken = nullptr) {
  auto p = make(parser);
  std::vector<StreamDelta> deltas;
  size_t prev = 0;
  for (size_t cut : cuts) {
    deltas.push_back(p->feed(text.substr(prev, cut - prev)));
    prev = cut;
  }
  deltas.push_back(p->feed(""));  // empty deltas are harmless
  deltas.push_back(p->feed(text.substr(prev)));
  deltas.push_back(p->finish());
  expect_openai_shape(deltas, utf8_valid(text));
  ParsedToolCalls r;
  for (const StreamDelta& d : deltas) append_delta(r, d);
  EXPECT_EQ(p->num_tool_calls(), r.tool_calls.size());
  if (broken) *broken = p->stream_broken();
  return r;
}

// parse_complete gives `want`, and so does every streamed split.
inline void expect_parses(std::string_view parser, std::string_view text, const Expected& want) {
  auto p = make(parser);
  expect_result(p->parse_complete(text), want, std::string(parser) + " complete");
  for (const auto& cuts : stream_splits(text)) {
    std::string where = std::string(parser) + " streamed in " + std::to_string(cuts.size() + 1) + " pieces";
    if (!cuts.empty()) where += " (first cut at " + std::to_string(cuts[0]) + ")";
    bool broken = true;
    ParsedToolCalls got = stream_split(parser, text, cuts, &broken);
    EXPECT_FALSE(broken) << where;
    expect_result(got, want, where);
    if (::testing::Test::HasFailure()) return;  // one failing split says enough
  }
}

inline Expected content_only(std::string_view text) { return Expected{std::string(text), {}}; }

}  // namespace kvasir::toolcall_test
