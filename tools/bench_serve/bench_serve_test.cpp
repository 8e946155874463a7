// Tests for the bench-serve client pieces: response framing (Content-Length,
// chunked split at every byte, close-delimited), SSE event splitting,
// stream-chunk accounting and the metrics math.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench_serve/bench_metrics.h"
#include "bench_serve/bench_report.h"
#include "bench_serve/http_client.h"
#include "bench_serve/http_response_parser.h"
#include "bench_serve/openai_request.h"
#include "bench_serve/sse.h"

namespace kvasir::bench {
namespace {

// Feeds `wire` in pieces of `step` bytes; returns the last result and the
// decoded body.
ResponseParser::Result feed_in_steps(ResponseParser *p, const std::string &wire,
                                     size_t step, std::string *body) {
  ResponseParser::Result r = ResponseParser::Result::kNeedMore;
  for (size_t i = 0; i < wire.size(); i += step)
    r = p->feed(std::string_view(wire).substr(i, step), body);
  return r;
}

TEST(ResponseParser, ContentLengthBodyCompletesAtItsLength) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
      "5\r\n\r\nhelloEXTRA";
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed(wire, &body), ResponseParser::Result::kComplete);
  EXPECT_EQ(p.status(), 200);
  EXPECT_EQ(body, "hello");
  EXPECT_EQ(p.header("content-type").value_or(""), "application/json");
}

TEST(ResponseParser, ChunkedBodyDecodesWhateverTheSplit) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\ndata: \r\n9;ext=1\r\n{\"a\":1}\n\n\r\n0\r\nX-Trailer: t\r\n\r\n";
  for (size_t step = 1; step <= wire.size(); ++step) {
    ResponseParser p;
    std::string body;
    ASSERT_EQ(feed_in_steps(&p, wire, step, &body),
              ResponseParser::Result::kComplete)
        << "step " << step;
    EXPECT_TRUE(p.chunked());
    EXPECT_EQ(body, "data: {\"a\":1}\n\n") << "step " << step;
  }
}

TEST(ResponseParser, ChunkSizesAreHexAndLfOnlyLinesAreAccepted) {
  const std::string payload(0x1f, 'x');
  const std::string wire =
      "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n1F\n" + payload +
      "\n0\n\n";
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed(wire, &body), ResponseParser::Result::kComplete);
  EXPECT_EQ(body, payload);
}

TEST(ResponseParser, BadChunkFramingIsAnError) {
  for (const std::string bad :
       {"zz\r\n", "5\r\nhelloX\r\n", "FFFFFFFFFFFFFFFF\r\n"}) {
    ResponseParser p;
    std::string body;
    EXPECT_EQ(
        p.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + bad,
               &body),
        ResponseParser::Result::kError)
        << bad;
    EXPECT_FALSE(p.error_message().empty());
  }
}

TEST(ResponseParser, BodyWithoutLengthEndsWhenTheServerCloses) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed("HTTP/1.0 200 OK\r\nContent-Type: "
                   "text/event-stream\r\n\r\ndata: 1\n\n",
                   &body),
            ResponseParser::Result::kNeedMore);
  EXPECT_TRUE(p.close_delimited());
  EXPECT_EQ(p.feed("data: 2\n\n", &body), ResponseParser::Result::kNeedMore);
  EXPECT_EQ(p.finish(), ResponseParser::Result::kComplete);
  EXPECT_EQ(body, "data: 1\n\ndata: 2\n\n");
}

TEST(ResponseParser, CloseBeforeTheEndOfALengthBodyIsAnError) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", &body),
            ResponseParser::Result::kNeedMore);
  EXPECT_EQ(p.finish(), ResponseParser::Result::kError);
}

TEST(ResponseParser, InterimContinueIsSkippedAndNoBodyStatusesComplete) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not "
                   "Found\r\nContent-Length: 2\r\n\r\nno",
                   &body),
            ResponseParser::Result::kComplete);
  EXPECT_EQ(p.status(), 404);
  EXPECT_EQ(body, "no");
  ResponseParser q;
  EXPECT_EQ(q.feed("HTTP/1.1 204 No Content\r\n\r\n", &body),
            ResponseParser::Result::kComplete);
}

TEST(ResponseParser, GarbageStatusLineIsAnError) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(p.feed("SSH-2.0-OpenSSH\r\n", &body),
            ResponseParser::Result::kError);
}

std::vector<SseEvent> split_all(const std::string &s, size_t step) {
  SseSplitter sp;
  std::vector<SseEvent> out;
  for (size_t i = 0; i < s.size(); i += step)
    sp.feed(std::string_view(s).substr(i, step), &out);
  return out;
}

TEST(SseSplitter, EventsEndAtBlankLinesWithAnyLineEnding) {
  const std::string s = "data: {\"a\":1}\n\n: ping\r\n\r\nevent: done\r\ndata: "
                        "x\r\ndata:y\r\n\r\ndata: [DONE]\r\r";
  for (size_t step = 1; step <= s.size(); ++step) {
    auto ev = split_all(s, step);
    ASSERT_EQ(ev.size(), 3u) << "step " << step;
    EXPECT_EQ(ev[0].data, "{\"a\":1}");
    EXPECT_EQ(ev[1].event, "done");
    EXPECT_EQ(ev[1].data, "x\ny");
    EXPECT_EQ(ev[2].data, "[DONE]");
  }
}

TEST(SseSplitter, UnterminatedEventIsNotEmitted) {
  auto ev = split_all("data: 1\n\ndata: 2\n", 100);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "1");
}

TEST(StreamData, ContentChunksSetTtftAndItlAndUsageSetsCounts) {
  RequestResult r;
  StreamState st;
  st.start = Clock::time_point{};
  const auto ms = [](int n) {
    return Clock::time_point{} + std::chrono::milliseconds(n);
  };
  ASSERT_TRUE(
      apply_stream_data(
          R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", true,
          ms(5), &st, &r)
          .ok());
  EXPECT_FALSE(st.first_chunk_seen); // a role-only chat chunk is no token
  ASSERT_TRUE(apply_stream_data(R"({"choices":[{"delta":{"content":"Hi"}}]})",
                                true, ms(10), &st, &r)
                  .ok());
  ASSERT_TRUE(
      apply_stream_data(R"({"choices":[{"delta":{"content":" there"}}]})", true,
                        ms(14), &st, &r)
          .ok());
  ASSERT_TRUE(
      apply_stream_data(
          R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}})",
          true, ms(15), &st, &r)
          .ok());
  ASSERT_TRUE(apply_stream_data("[DONE]", true, ms(16), &st, &r).ok());
  EXPECT_TRUE(st.done);
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.010);
  ASSERT_EQ(r.itl_s.size(), 1u);
  EXPECT_NEAR(r.itl_s[0], 0.004, 1e-12);
  EXPECT_EQ(r.generated_text, "Hi there");
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_EQ(r.prompt_len, 7);
  EXPECT_FALSE(apply_stream_data(R"({"error":{"message":"boom"}})", false,
                                 ms(20), &st, &r)
                   .ok());
  EXPECT_FALSE(apply_stream_data("{not json", false, ms(20), &st, &r).ok());
}

TEST(RequestBody, CarriesStreamUsageIgnoreEosAndExtraBody) {
  RequestConfig cfg;
  cfg.model = "smol";
  cfg.ignore_eos = true;
  cfg.extra_body.set("n_predict", 3);
  auto j = parse_json(build_request_body(cfg, BenchRequest{"hello", 1, 3}));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->get_string("prompt"), "hello");
  EXPECT_EQ(j->get_int("max_tokens", 0), 3);
  EXPECT_TRUE(j->get_bool("ignore_eos", false));
  EXPECT_TRUE(j->find("stream_options")->get_bool("include_usage", false));
  EXPECT_EQ(j->get_int("n_predict", 0), 3);
  cfg.endpoint = "/v1/chat/completions";
  j = parse_json(build_request_body(cfg, BenchRequest{"hello", 1, 3}));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->find("messages")->as_array()[0].get_string("content"), "hello");
}

TEST(BaseUrl, ParsesHostPortAndPrefix) {
  auto u = parse_base_url("http://localhost:8080/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path_prefix, "/api");
  u = parse_base_url("http://[::1]:9000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_FALSE(parse_base_url("https://x").ok());
  EXPECT_FALSE(parse_base_url("http://x:99999").ok());
}

TEST(Metrics, PercentileInterpolatesLinearlyLikeNumpy) {
  const std::vector<double> v = {15, 20, 35, 40, 50};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 35);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 46);   // numpy.percentile(v, 90)
  EXPECT_DOUBLE_EQ(percentile(v, 99), 49.6); // numpy.percentile(v, 99)
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0);
  Distribution d = summarize({1, 2, 3, 4}, {25, 75});
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_NEAR(d.std, 1.118033988749895, 1e-12); // numpy.std (population)
  EXPECT_DOUBLE_EQ(d.percentiles[0], 1.75);
  EXPECT_DOUBLE_EQ(d.percentiles[1], 3.25);
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
}

TEST(Metrics, SummaryCountsThroughputTpotAndGoodput) {
  RequestResult a, b, failed;
  a.success = b.success = true;
  a.prompt_len = 10, a.output_tokens = 5, a.expected_output_len = 5,
  a.ttft_s = 0.1, a.latency_s = 0.5;
  a.itl_s = {0.1, 0.1, 0.1, 0.1};
  b.prompt_len = 20, b.output_tokens = 1, b.expected_output_len = 4,
  b.ttft_s = 0.3, b.latency_s = 0.3;
  failed.error = "x";
  auto slo = parse_goodput({"ttft:200", "tpot:150"});
  ASSERT_TRUE(slo.ok());
  BenchSummary s = compute_summary({a, b, failed}, 2.0, *slo, {99});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input, 30);
  EXPECT_EQ(s.total_output, 6);
  EXPECT_EQ(s.num_output_len_mismatch, 1);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 18.0);
  EXPECT_DOUBLE_EQ(s.tpot_ms.mean,
                   100.0); // only `a` has > 1 token: (500 - 100) / 4
  EXPECT_DOUBLE_EQ(s.itl_ms.mean, 100.0);
  EXPECT_EQ(s.good_completed, 1); // b misses the TTFT SLO
  EXPECT_DOUBLE_EQ(s.request_goodput, 0.5);
}

TEST(Metrics, GoodputParsingRejectsUnknownMetricsAndBadValues) {
  EXPECT_TRUE(parse_goodput({"ttft:1 e2el:2,tpot:3"}).ok());
  EXPECT_FALSE(parse_goodput({"foo:1"}).ok());
  EXPECT_FALSE(parse_goodput({"ttft:abc"}).ok());
  EXPECT_FALSE(parse_goodput({"ttft"}).ok());
  EXPECT_FALSE(parse_goodput({"ttft:-1"}).ok());
}

// --percentile-metrics and --metric-percentiles choose the rows and keys, in
// vLLM's names, and goodput appears only with SLOs.
TEST(Report, ChosenMetricsAndPercentilesInTextAndJson) {
  std::vector<RequestResult> rs(4);
  for (size_t i = 0; i < rs.size(); ++i) {
    rs[i].success = true;
    rs[i].prompt_len = 10;
    rs[i].output_tokens = rs[i].expected_output_len = 3;
    rs[i].ttft_s = 0.1 * static_cast<double>(i + 1);
    rs[i].latency_s = rs[i].ttft_s + 0.2;
    rs[i].itl_s = {0.1, 0.1};
  }
  auto slo = parse_goodput({"ttft:250"});
  ASSERT_TRUE(slo.ok());
  ReportOptions o;
  o.metrics = {"ttft", "itl"};
  o.percentiles = {50, 99.9};
  o.goodput = slo->any();
  const BenchSummary s = compute_summary(rs, 2.0, *slo, o.percentiles);
  const std::string text = format_report(s, o);
  for (const char *row :
       {"Request goodput (req/s):", "Mean TTFT (ms):", "Median TTFT (ms):",
        "P50 TTFT (ms):", "P99.9 TTFT (ms):", "P99.9 ITL (ms):"})
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  EXPECT_EQ(text.find("TPOT"), std::string::npos) << text;
  EXPECT_EQ(text.find("E2EL"), std::string::npos) << text;
  const Json j = report_json(s, o, rs, false);
  // 2 of the 4 requests meet the TTFT SLO in 2 s.
  EXPECT_DOUBLE_EQ(j.find("request_goodput")->as_double(), 1.0);
  EXPECT_NEAR(j.find("p50_ttft_ms")->as_double(), 250, 1e-9);
  EXPECT_NEAR(j.find("p99.9_ttft_ms")->as_double(), 399.7, 1e-9);
  EXPECT_NEAR(j.find("median_itl_ms")->as_double(), 100, 1e-9);
  EXPECT_EQ(j.find("mean_tpot_ms"), nullptr);
  EXPECT_EQ(j.find("p99_ttft_ms"), nullptr);
}

} // namespace
} // namespace kvasir::bench
