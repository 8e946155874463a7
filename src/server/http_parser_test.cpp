#include "server/http_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvasir::http {
namespace {

struct Outcome {
  std::vector<Request> requests;
  std::vector<bool> keep_alive;
  int error = 0;  // status of the first error, 0 if none
  size_t consumed = 0;
};

// Feeds `input` in pieces of `piece` bytes (0: all at once), collecting every request.
Outcome parse(std::string_view input, const ParserLimits& limits = {}, size_t piece = 0) {
  Outcome out;
  RequestParser parser(limits);
  if (piece == 0) piece = input.size() + 1;
  for (size_t pos = 0; pos < input.size() && out.error == 0;) {
    std::string_view chunk = input.substr(pos, piece);
    while (!chunk.empty()) {
      size_t used = 0;
      const auto r = parser.feed(chunk, &used);
      chunk.remove_prefix(used);
      out.consumed += used;
      if (r == RequestParser::Result::kError) {
        out.error = parser.error_status();
        break;
      }
      if (r == RequestParser::Result::kNeedMore) {
        EXPECT_TRUE(chunk.empty());
        break;
      }
      out.keep_alive.push_back(parser.keep_alive());
      out.requests.push_back(parser.take_request());
    }
    pos += piece;
  }
  return out;
}

int status_of(std::string_view input, const ParserLimits& limits = {}) {
  return parse(input, limits).error;
}

TEST(HttpParser, ParsesSimpleGet) {
  const auto o = parse("GET /v1/models?x=1&y=2 HTTP/1.1\r\nHost: a\r\nX-Thing:  v a l \t\r\n\r\n");
  ASSERT_EQ(o.error, 0);
  ASSERT_EQ(o.requests.size(), 1u);
  const Request& r = o.requests[0];
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/v1/models?x=1&y=2");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1&y=2");
  EXPECT_EQ(r.version_minor, 1);
  ASSERT_EQ(r.headers.size(), 2u);
  EXPECT_EQ(r.headers[1].first, "x-thing");
  EXPECT_EQ(*r.header("x-thing"), "v a l");
  EXPECT_TRUE(r.body.empty());
}

TEST(HttpParser, AbsoluteFormLosesSchemeAndAuthority) {
  const auto o = parse("GET http://example.com:8/a/b?q HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].path, "/a/b");
  EXPECT_EQ(o.requests[0].query, "q");
}

TEST(HttpParser, ContentLengthBodyAtEveryChunking) {
  const std::string in = "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world";
  for (size_t piece = 1; piece <= in.size(); ++piece) {
    const auto o = parse(in, {}, piece);
    ASSERT_EQ(o.requests.size(), 1u) << piece;
    EXPECT_EQ(o.requests[0].body, "hello world");
  }
}

TEST(HttpParser, ChunkedBodySplitAtEveryPairOfBoundaries) {
  const std::string in =
      "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1\r\n \r\nA ; q=\"x y\"\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n";
  for (size_t i = 0; i <= in.size(); ++i) {
    for (size_t j = i; j <= in.size(); ++j) {
      RequestParser parser;
      int completed = 0;
      for (std::string_view part :
           {std::string_view(in).substr(0, i), std::string_view(in).substr(i, j - i),
            std::string_view(in).substr(j)}) {
        size_t used = 0;
        const auto r = parser.feed(part, &used);
        ASSERT_NE(r, RequestParser::Result::kError)
            << i << "," << j << ": " << parser.error_message();
        ASSERT_EQ(used, part.size());
        if (r == RequestParser::Result::kComplete) {
          ++completed;
          EXPECT_EQ(parser.take_request().body, "hello 0123456789");
        }
      }
      ASSERT_EQ(completed, 1) << i << "," << j;
    }
  }
}

TEST(HttpParser, TrailersAreNotHeaders) {
  const auto o = parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].header("x-t"), nullptr);
}

TEST(HttpParser, PipelinedRequestsComeOutInOrder) {
  const std::string in =
      "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
      "POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
      "GET /4 HTTP/1.0\r\n\r\n";
  for (size_t piece : {0, 1, 7}) {
    const auto o = parse(in, {}, piece);
    ASSERT_EQ(o.error, 0);
    ASSERT_EQ(o.requests.size(), 4u);
    EXPECT_EQ(o.requests[0].path, "/1");
    EXPECT_EQ(o.requests[1].body, "abc");
    EXPECT_EQ(o.requests[2].body, "xy");
    EXPECT_EQ(o.requests[3].version_minor, 0);
  }
}

TEST(HttpParser, StopsExactlyAtTheEndOfARequest) {
  RequestParser parser;
  size_t used = 0;
  const std::string in = "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next";
  EXPECT_EQ(parser.feed(in, &used), RequestParser::Result::kComplete);
  EXPECT_EQ(used, in.size() - 9);
  EXPECT_EQ(parser.feed("more", &used), RequestParser::Result::kComplete);
  EXPECT_EQ(used, 0u);
}

TEST(HttpParser, KeepAliveDefaultsAndConnectionHeader) {
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n").keep_alive.at(0));
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive.at(0));
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, CLOSE\r\n\r\n").keep_alive.at(0));
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").keep_alive.at(0));
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive.at(0));
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive.at(0));
}

TEST(HttpParser, ExpectContinueOnlyWhileBodyPending) {
  RequestParser parser;
  size_t used = 0;
  EXPECT_FALSE(parser.started());
  EXPECT_EQ(parser.feed("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n", &used),
            RequestParser::Result::kNeedMore);
  EXPECT_TRUE(parser.started());
  EXPECT_FALSE(parser.expects_continue());
  EXPECT_EQ(parser.feed("\r\n", &used), RequestParser::Result::kNeedMore);
  EXPECT_TRUE(parser.expects_continue());
  EXPECT_EQ(parser.feed("ok", &used), RequestParser::Result::kComplete);
  EXPECT_FALSE(parser.expects_continue());
  parser.take_request();
  EXPECT_FALSE(parser.started());
  parser.feed("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", &used);
  EXPECT_FALSE(parser.expects_continue());  // HTTP/1.0 clients do not wait for it
}

TEST(HttpParser, IgnoresEmptyLinesBeforeARequest) {
  const auto o = parse("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(o.error, 0);
  EXPECT_EQ(o.requests.size(), 1u);
}

TEST(HttpParser, MalformedInputIs400) {
  const char* cases[] = {
      "GET /\r\n\r\n",                       // HTTP/0.9 form
      "GET  / HTTP/1.1\r\n\r\n",             // double space
      "GET / HTTP/1.1 \r\n\r\n",             // trailing space
      "G(T / HTTP/1.1\r\n\r\n",              // invalid method char
      "GET / http/1.1\r\n\r\n",              // lower-case version
      "GET / HTTP/1.10\r\n\r\n",             // long version
      "GET /a\x01 HTTP/1.1\r\n\r\n",         // control in target
      "GET /\xff HTTP/1.1\r\n\r\n",          // non-ASCII target
      "GET / HTTP/1.1\n\n",                  // bare LF
      "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",   // bare CR
      "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n",  // DEL in value
      "GET / HTTP/1.1\r\nA : b\r\n\r\n",     // space before colon
      "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
      "GET / HTTP/1.1\r\n: v\r\n\r\n",               // empty name
      "GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n",  // obs-fold
      "GET / HTTP/1.1\r\n X: y\r\n\r\n",             // whitespace before first header
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n",
      "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n",        // bad size
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",         // empty size
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2 x\r\n",      // junk after size
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2;a\x01\r\n",  // control in ext
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc",     // data longer than size
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\n",    // LF without CR
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
  };
  for (const char* c : cases) EXPECT_EQ(status_of(c), 400) << c;
  const std::string nul_value("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 27);
  EXPECT_EQ(status_of(nul_value), 400);
  const std::string nul_method("G\0T / HTTP/1.1\r\n\r\n", 18);
  EXPECT_EQ(status_of(nul_method), 400);
  EXPECT_EQ(status_of(std::string(RequestParser::kMaxMethodBytes + 1, 'M') + " / HTTP/1.1\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                      std::string(RequestParser::kMaxChunkLineBytes, 'e') + "\r\n"),
            400);
}

TEST(HttpParser, Http11WithoutHostIs400) {
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"), 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHOST: a\r\n\r\n").requests.size(), 1u);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost:\r\n\r\n").requests.size(), 1u);  // empty is allowed
  EXPECT_EQ(parse("GET / HTTP/1.0\r\n\r\n").requests.size(), 1u);            // HTTP/1.0 may omit it
}

TEST(HttpParser, NothingIsConsumedAfterAnError) {
  RequestParser parser;
  size_t used = 0;
  EXPECT_EQ(parser.feed("BAD\r\n", &used), RequestParser::Result::kError);
  EXPECT_EQ(parser.feed("GET / HTTP/1.1\r\n\r\n", &used), RequestParser::Result::kError);
  EXPECT_EQ(used, 0u);
  parser.reset();
  EXPECT_EQ(parser.feed("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &used), RequestParser::Result::kComplete);
}

TEST(HttpParser, DuplicateContentLengthsThatAgreeAreAccepted) {
  const auto a = parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 003\r\n\r\nabc");
  ASSERT_EQ(a.requests.size(), 1u);
  EXPECT_EQ(a.requests[0].body, "abc");
  const auto b = parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc");
  ASSERT_EQ(b.requests.size(), 1u);
}

TEST(HttpParser, BodyLimitIs413ExactlyOnePastIt) {
  ParserLimits limits;
  limits.max_body_bytes = 10;
  const std::string at = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789";
  EXPECT_EQ(parse(at, limits).requests.size(), 1u);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n", limits), 413);
  EXPECT_EQ(
      status_of("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999999\r\n\r\n", limits),
      413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n"), 413);
  const std::string chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(parse(chunked + "6\r\n012345\r\n4\r\n6789\r\n0\r\n\r\n", limits).requests.size(), 1u);
  EXPECT_EQ(status_of(chunked + "6\r\n012345\r\n5\r\n", limits), 413);
  EXPECT_EQ(status_of(chunked + "fffffffffffffffffffffffff\r\n", limits), 413);
}

TEST(HttpParser, UriLimitIs414ExactlyOnePastIt) {
  ParserLimits limits;
  limits.max_uri_bytes = 64;
  const std::string at = "/" + std::string(63, 'a');
  EXPECT_EQ(parse("GET " + at + " HTTP/1.1\r\nHost: a\r\n\r\n", limits).requests.size(), 1u);
  EXPECT_EQ(status_of("GET " + at + "b HTTP/1.1\r\n\r\n", limits), 414);
  // A target that never ends is refused before the line does.
  EXPECT_EQ(status_of("GET /" + std::string(200, 'a'), limits), 414);
  EXPECT_EQ(status_of("POST /" + std::string(200, 'a'), limits), 414);
}

TEST(HttpParser, HeaderBytesLimitIs431ExactlyOnePastIt) {
  ParserLimits limits;
  limits.max_header_bytes = 100;
  const std::string start = "GET / HTTP/1.1\r\nHost: a\r\nX: ";  // 28 bytes
  const std::string at = start + std::string(100 - 28 - 4, 'v') + "\r\n\r\n";
  ASSERT_EQ(at.size(), 100u);
  EXPECT_EQ(parse(at, limits).requests.size(), 1u);
  for (size_t piece : {0, 1, 13}) {
    EXPECT_EQ(parse(start + std::string(100 - 28 - 3, 'v') + "\r\n\r\n", limits, piece).error, 431);
  }
  EXPECT_EQ(status_of(start + std::string(500, 'v'), limits), 431);  // never-ending header
  // Trailers share the header budget.
  limits.max_header_bytes = 69;
  const std::string chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";  // 56 bytes
  EXPECT_EQ(parse(chunked + "0\r\nT: 123456\r\n\r\n", limits).requests.size(), 1u);
  EXPECT_EQ(status_of(chunked + "0\r\nT: 1234567\r\n\r\n", limits), 431);
}

TEST(HttpParser, HeaderCountLimitIs431ExactlyOnePastIt) {
  ParserLimits limits;
  limits.max_header_count = 5;
  std::string at = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 4; ++i) at += "H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse(at + "\r\n", limits).requests.size(), 1u);
  EXPECT_EQ(status_of(at + "H4: v\r\n\r\n", limits), 431);
}

TEST(HttpParser, UnsupportedTransferCodingIs501) {
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n"), 501);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n").requests.size(),
            1u);
}

TEST(HttpParser, UnsupportedVersionIs505) {
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/1.2\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/0.9\r\n\r\n"), 505);
}

}  // namespace
}  // namespace kvasir::http
