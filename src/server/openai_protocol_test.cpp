// Unit tests of the OpenAI layer that need no engine or sockets: request parsing and its error
// messages, the error envelope, logprobs shapes, and the router's 404/405/401/503 answers.
#include <gtest/gtest.h>

#include <limits>

#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/protocol_test_util.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

using test_util::parse;

Status completion(const std::string& body, CompletionRequest* out) {
  return parse_completion_request(parse(body), SamplingParams(), out);
}

TEST(OpenAIProtocol, ErrorMessagesAreCappedAtACharacterBoundary) {
  const std::string short_text(kMaxErrorMessageBytes, 'x');
  EXPECT_EQ(capped_error_message(short_text), short_text);
  const std::string huge(30'000'000, 'x');
  const Json body = error_body({400, huge});
  const std::string& m = body.find("error")->find("message")->as_string();
  EXPECT_LT(m.size(), kMaxErrorMessageBytes + 100);
  EXPECT_NE(m.find("truncated; 30000000 bytes"), std::string::npos) << m.substr(kMaxErrorMessageBytes);
  // A two-byte character straddling the cut is left out whole.
  const std::string accents = "x" + [] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += "\xc3\xa9";
    return s;
  }();
  const std::string cut = capped_error_message(accents);
  EXPECT_EQ(cut.find("... [error"), kMaxErrorMessageBytes - 1);
}

TEST(OpenAIProtocol, CompletionPromptShapes) {
  CompletionRequest r;
  ASSERT_TRUE(completion(R"({"prompt": "hi", "max_tokens": 3})", &r).ok());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_EQ(r.params.max_tokens, 3);

  CompletionRequest r2;
  ASSERT_TRUE(completion(R"({"prompt": ["a", "b"]})", &r2).ok());
  EXPECT_EQ(r2.prompts.size(), 2u);
  EXPECT_FALSE(r2.max_tokens_set);

  CompletionRequest r3;
  ASSERT_TRUE(completion(R"({"prompt": [1, 2, 3]})", &r3).ok());
  ASSERT_EQ(r3.prompts.size(), 1u);
  EXPECT_EQ(r3.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));

  CompletionRequest r4;
  ASSERT_TRUE(completion(R"({"prompt": [[1], [2, 3]]})", &r4).ok());
  EXPECT_EQ(r4.prompts.size(), 2u);
}

TEST(OpenAIProtocol, CompletionRejectsBadInput) {
  CompletionRequest r;
  EXPECT_FALSE(completion(R"({})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": []})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": [[]]})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": [1, "a"]})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": 5})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": "x", "temperature": "hot"})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": "x", "stream": 1})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": "x", "stream_options": {"include_usage": true}})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": "x", "model": 7})", &r).ok());
  Status s = completion(R"({"prompt": "x", "suffix": "y"})", &r);
  EXPECT_NE(s.message().find("suffix"), std::string::npos);
}

// Integers past int64 arrive as doubles; 2^63 once reached a double -> int64 conversion (UB,
// found by sampling_json_fuzz). Every such value must be a clear range error.
TEST(OpenAIProtocol, IntegerParametersAtTheInt64Edges) {
  CompletionRequest r;
  ASSERT_TRUE(completion(R"({"prompt": "x", "seed": 9223372036854775807})", &r).ok());
  EXPECT_EQ(r.params.seed, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  ASSERT_TRUE(completion(R"({"prompt": "x", "seed": -9223372036854775808})", &r).ok());
  ASSERT_TRUE(completion(R"({"prompt": "x", "seed": 4611686018427387904.0})", &r).ok());
  EXPECT_EQ(r.params.seed, 4611686018427387904u);
  for (const char* big : {"9223372036854775808", "9223372036854775808.0", "1e19", "-9223372036854777856",
                          "-1e300", "1e300"}) {
    Status st = completion(std::string(R"({"prompt": "x", "seed": )") + big + "}", &r);
    EXPECT_FALSE(st.ok()) << big;
    EXPECT_NE(st.message().find("'seed' must be in"), std::string::npos) << big << ": " << st.message();
  }
  EXPECT_FALSE(completion(R"({"prompt": "x", "max_tokens": 9223372036854775808})", &r).ok());
  EXPECT_FALSE(completion(R"({"prompt": "x", "max_tokens": 2147483648})", &r).ok());
}

TEST(OpenAIProtocol, EchoWithLogprobsAsksForPromptLogprobs) {
  CompletionRequest r;
  ASSERT_TRUE(completion(R"({"prompt": "x", "echo": true, "logprobs": 2})", &r).ok());
  EXPECT_EQ(r.params.prompt_logprobs, 2);
}

TEST(OpenAIProtocol, ChatMessagesNormalized) {
  ChatRequest r;
  const std::string body = R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5, "stream": true,
      "stream_options": {"include_usage": true}})";
  ASSERT_TRUE(parse_chat_request(parse(body), SamplingParams(), &r).ok());
  EXPECT_EQ(r.messages.as_array()[1].find("content")->as_string(), "a\nb");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.add_generation_prompt);
}

TEST(OpenAIProtocol, ChatRejectsBadMessages) {
  ChatRequest r;
  EXPECT_FALSE(parse_chat_request(parse(R"({"messages": []})"), SamplingParams(), &r).ok());
  EXPECT_FALSE(parse_chat_request(parse(R"({"messages": "hi"})"), SamplingParams(), &r).ok());
  EXPECT_FALSE(parse_chat_request(parse(R"({"messages": [{"content": "x"}]})"), SamplingParams(), &r).ok());
  EXPECT_FALSE(parse_chat_request(parse(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
                                  SamplingParams(), &r)
                   .ok());
  EXPECT_FALSE(parse_chat_request(parse(R"({})"), SamplingParams(), &r).ok());
}

TEST(OpenAIProtocol, ErrorEnvelopeAndParam) {
  ApiError e = api_error_from_status(invalid_argument("'top_p' must be a number"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "top_p");
  ApiError e2 = api_error_from_status(invalid_argument("temperature must be non-negative and finite, got -1."));
  EXPECT_EQ(e2.param, "temperature");
  http::Response r = error_response(e);
  auto j = parse_json(r.body);
  ASSERT_TRUE(j.ok());
  const Json* err = j->find("error");
  ASSERT_NE(err, nullptr);
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(err->contains(k)) << k;
  EXPECT_EQ(api_error_from_status(resource_exhausted("x")).status, 429);
  EXPECT_EQ(api_error_from_status(unavailable("x")).status, 503);
  EXPECT_EQ(api_error_from_status(not_found("x")).status, 404);
}

TEST(OpenAIProtocol, BodyMustBeAJsonObject) {
  EXPECT_FALSE(parse_json_object_body("{").ok());
  EXPECT_FALSE(parse_json_object_body("[1]").ok());
  EXPECT_FALSE(parse_json_object_body("{\"a\": NaN}").ok());
  EXPECT_TRUE(parse_json_object_body("{\"a\": 1}").ok());
}

TEST(OpenAIResponse, IdsUsageAndSse) {
  std::string id = make_request_id("cmpl-");
  EXPECT_EQ(id.size(), 5u + 32u);
  EXPECT_NE(id, make_request_id("cmpl-"));
  Json u = usage_json(3, 4);
  EXPECT_EQ(u.find("total_tokens")->as_int(), 7);
  EXPECT_EQ(sse_event(Json::object()), "data: {}\n\n");
  EXPECT_EQ(json_logprob(-std::numeric_limits<float>::infinity()), -9999.0);
}

// A Reply that records what the router answered.
class FakeReply : public http::Reply {
 public:
  void respond(http::Response r) override { response = std::move(r); }
  std::shared_ptr<http::Stream> stream() override { return nullptr; }
  bool client_gone() const override { return false; }
  void notify_when_gone(std::shared_ptr<BlockingQueue<uint64_t>>, uint64_t) override {}
  http::Response response{0, {}, ""};
};

http::Response route(Router& router, const std::string& method, const std::string& path,
                     std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::Request req;
  req.method = method;
  req.path = path;
  req.target = path;
  req.headers = std::move(headers);
  auto reply = std::make_shared<FakeReply>();
  router.handle(req, reply);
  return reply->response;
}

TEST(Router, StatusesBeforeTheModelIsLoaded) {
  Router router(RouterOptions{"secret", "0.1.0"});
  const std::vector<std::pair<std::string, std::string>> key = {{"authorization", "Bearer secret"}};
  // One rule: every path but the probes needs the key, before it learns whether the path exists.
  EXPECT_EQ(route(router, "GET", "/nope").status, 401);
  EXPECT_EQ(route(router, "GET", "/nope", key).status, 404);
  EXPECT_EQ(route(router, "GET", "/v1/completions").status, 401);
  EXPECT_EQ(route(router, "GET", "/v1/completions", key).status, 405);
  EXPECT_EQ(route(router, "POST", "/tokenize").status, 401);
  EXPECT_EQ(route(router, "POST", "/detokenize").status, 401);
  EXPECT_EQ(route(router, "POST", "/tokenize", key).status, 503);
  EXPECT_EQ(route(router, "GET", "/version").status, 200);
  EXPECT_EQ(route(router, "HEAD", "/version").status, 200);
  EXPECT_EQ(route(router, "GET", "/health").status, 503);
  EXPECT_EQ(route(router, "HEAD", "/health").status, 503);
  EXPECT_EQ(route(router, "GET", "/v1/models").status, 401);
  EXPECT_EQ(route(router, "GET", "/v1/models", {{"authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(route(router, "GET", "/v1/models", {{"authorization", "Bearer secret"}}).status, 503);
  http::Response m = route(router, "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("kvasir:http_requests_total"), std::string::npos);
}

TEST(Router, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "abcd"));
  EXPECT_FALSE(constant_time_equals("", "a"));
  EXPECT_TRUE(constant_time_equals("", ""));
}

}  // namespace
}  // namespace kvasir::server
