#include "toolcall/json_scanner.h"

#include <gtest/gtest.h>

#include <string>

#include "common/json.h"

namespace kvasir::toolcall {
namespace {

// Feeds `text` whole, then byte by byte; both must agree. Returns the state after finish() and
// where the scan stopped.
JsonScanner::State scan(std::string_view text, size_t* stop) {
  JsonScanner whole;
  size_t n = 0;
  JsonScanner::State s = whole.feed(text, &n);
  if (s == JsonScanner::State::kMore) s = whole.finish();
  JsonScanner bytes;
  size_t total = 0;
  JsonScanner::State b = JsonScanner::State::kMore;
  for (size_t i = 0; i < text.size() && b == JsonScanner::State::kMore; ++i) {
    size_t k = 0;
    b = bytes.feed(text.substr(i, 1), &k);
    total += k;
  }
  if (b == JsonScanner::State::kMore) b = bytes.finish();
  EXPECT_EQ(s, b) << text;
  EXPECT_EQ(n, total) << text;
  *stop = n;
  return s;
}

TEST(JsonScanner, AgreesWithParseJsonOnValidAndInvalidDocuments) {
  const char* docs[] = {
      "{}", "[]", "{\"a\": 1}", "{\"a\": [1, 2.5, -3e-2, 0, -0.0, 1E+9], \"b\": {\"c\": null}}",
      "[true, false, null, \"x\"]", "\"str\"", "\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "12", "-0", "3.25e10",
      "{ \"k\" : [ { } , [ ] ] }", "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"",
      // invalid
      "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\xff\"",
      "\"\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "tru", "nul", "{\"a\":1,}", "\"a\tb\"", "1e", "NaN",
      "1e999", "{'a': 1}", "[1 2]", "{\"a\":}", "{,}", "[,1]", "\"\\x41\"", "\"\\u12G4\"", "{\"a\":1}}", "[1]]",
  };
  for (const char* doc : docs) {
    size_t stop = 0;
    JsonScanner::State s = scan(doc, &stop);
    bool valid = parse_json(doc).ok();
    std::string text(doc);
    if (valid) {
      EXPECT_EQ(s, JsonScanner::State::kDone) << doc;
      EXPECT_EQ(stop, text.size()) << doc;
    } else {
      // Either an error, or a value that ended before trailing garbage.
      bool ended_early = s == JsonScanner::State::kDone && stop < text.size();
      EXPECT_TRUE(s == JsonScanner::State::kError || ended_early) << doc;
    }
  }
}

TEST(JsonScanner, EveryPrefixOfAValidDocumentIsStillOpen) {
  std::string doc = R"({"q": "caf\u00e9 \ud83d\ude00", "n": [1, -2.5e3, true, null], "o": {"x": {}}})";
  for (size_t i = 0; i < doc.size(); ++i) {
    JsonScanner s;
    size_t n = 0;
    EXPECT_EQ(s.feed(doc.substr(0, i), &n), JsonScanner::State::kMore) << i;
    EXPECT_EQ(n, i);
  }
}

TEST(JsonScanner, StopsBeforeTheFirstBadByteAndAfterTheValue) {
  JsonScanner s;
  size_t n = 0;
  EXPECT_EQ(s.feed(R"({"a": True})", &n), JsonScanner::State::kError);
  EXPECT_EQ(n, 6u);  // `{"a": ` was fine
  s.reset();
  EXPECT_EQ(s.feed(R"({"a": 1}</tool_call>)", &n), JsonScanner::State::kDone);
  EXPECT_EQ(n, 8u);
  s.reset();
  EXPECT_EQ(s.feed("123,", &n), JsonScanner::State::kDone);  // a top-level number ends at ','
  EXPECT_EQ(n, 3u);
  s.reset();
  EXPECT_EQ(s.feed("123", &n), JsonScanner::State::kMore);
  EXPECT_EQ(s.finish(), JsonScanner::State::kDone);
}

TEST(JsonScanner, RefusesNestingPastItsLimit) {
  std::string deep(JsonScanner::kMaxDepth + 1, '[');
  JsonScanner s;
  size_t n = 0;
  EXPECT_EQ(s.feed(deep, &n), JsonScanner::State::kError);
  EXPECT_EQ(n, JsonScanner::kMaxDepth);
}

}  // namespace
}  // namespace kvasir::toolcall
