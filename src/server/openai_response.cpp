#include "server/openai_response.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>

#include "common/utf8.h"

namespace kvasir::server {

std::string make_request_id(std::string_view prefix) {
  // One generator for the process, seeded from the OS: ids must not repeat across restarts.
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = gen();
    b = gen();
  }
  static const char* kHex = "0123456789abcdef";
  std::string id(prefix);
  for (uint64_t v : {a, b}) {
    for (int i = 15; i >= 0; --i) id += kHex[(v >> (4 * i)) & 0xf];
  }
  return id;
}

int64_t unix_time_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  Json u = Json::object();
  u.set("prompt_tokens", prompt_tokens);
  u.set("completion_tokens", completion_tokens);
  u.set("total_tokens", prompt_tokens + completion_tokens);
  return u;
}

double json_logprob(float logprob) {
  if (std::isnan(logprob)) return -9999.0;
  return std::max(static_cast<double>(logprob), -9999.0);
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  const int32_t ids[1] = {id};
  return utf8_sanitize(tok.decode_continuation(ids, /*skip_special_tokens=*/false));
}

void CompletionLogprobs::add_unscored(const Tokenizer& tok, int32_t token_id) {
  std::string t = token_text(tok, token_id);
  text_offset_.push_back(static_cast<int64_t>(offset_));
  offset_ += t.size();
  tokens_.push_back(std::move(t));
  token_logprobs_.push_back(Json());
  top_logprobs_.push_back(Json());
}

void CompletionLogprobs::add(const Tokenizer& tok, const PositionLogprobs& p) {
  std::string t = token_text(tok, p.chosen.token_id);
  text_offset_.push_back(static_cast<int64_t>(offset_));
  offset_ += t.size();
  token_logprobs_.push_back(json_logprob(p.chosen.logprob));
  // vLLM's shape: the top-N alternatives, plus the chosen token when it is not among them.
  Json top = Json::object();
  for (const TokenLogprob& alt : p.top) top.set(token_text(tok, alt.token_id), json_logprob(alt.logprob));
  if (!top.contains(t)) top.set(t, json_logprob(p.chosen.logprob));
  top_logprobs_.push_back(std::move(top));
  tokens_.push_back(std::move(t));
}

Json CompletionLogprobs::take() {
  Json o = Json::object();
  o.set("text_offset", std::move(text_offset_));
  o.set("token_logprobs", std::move(token_logprobs_));
  o.set("tokens", std::move(tokens_));
  o.set("top_logprobs", std::move(top_logprobs_));
  text_offset_ = Json::array();
  token_logprobs_ = Json::array();
  tokens_ = Json::array();
  top_logprobs_ = Json::array();
  return o;
}

namespace {

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

Json chat_logprobs_json(const Tokenizer& tok, const std::vector<PositionLogprobs>& lps, int num_top) {
  Json content = Json::array();
  for (const PositionLogprobs& p : lps) {
    Json e = Json::object();
    std::string t = token_text(tok, p.chosen.token_id);
    e.set("token", t);
    e.set("logprob", json_logprob(p.chosen.logprob));
    e.set("bytes", bytes_of(t));
    Json top = Json::array();
    for (const TokenLogprob& alt : p.top) {
      if (static_cast<int>(top.size()) >= num_top) break;
      Json a = Json::object();
      std::string at = token_text(tok, alt.token_id);
      a.set("token", at);
      a.set("logprob", json_logprob(alt.logprob));
      a.set("bytes", bytes_of(at));
      top.push_back(std::move(a));
    }
    e.set("top_logprobs", std::move(top));
    content.push_back(std::move(e));
  }
  Json o = Json::object();
  o.set("content", std::move(content));
  return o;
}

Json prompt_logprobs_json(const Tokenizer& tok, const std::vector<PositionLogprobs>& lps, int num_top) {
  Json out = Json::array();
  out.push_back(Json());
  auto entry = [&](const TokenLogprob& t) {
    Json e = Json::object();
    e.set("logprob", json_logprob(t.logprob));
    e.set("rank", t.rank);
    e.set("decoded_token", token_text(tok, t.token_id));
    return e;
  };
  for (const PositionLogprobs& p : lps) {
    Json pos = Json::object();
    int shown = 0;
    for (const TokenLogprob& alt : p.top) {
      if (shown++ >= num_top) break;
      pos.set(std::to_string(alt.token_id), entry(alt));
    }
    pos.set(std::to_string(p.chosen.token_id), entry(p.chosen));
    out.push_back(std::move(pos));
  }
  return out;
}

Json response_envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                       Json choices, Json usage) {
  Json o = Json::object();
  o.set("id", id);
  o.set("object", object);
  o.set("created", created);
  o.set("model", model);
  o.set("choices", std::move(choices));
  if (!usage.is_null()) o.set("usage", std::move(usage));
  return o;
}

std::string dump_json_utf8(const Json& j) {
  std::string s = j.dump();
  // Raw bytes pass through Json::dump; a token that splits a character must not break clients.
  return utf8_valid(s) ? s : utf8_sanitize(s);
}

std::string sse_event(const Json& data) {
  std::string s = "data: ";
  s += dump_json_utf8(data);
  s += "\n\n";
  return s;
}

}  // namespace kvasir::server
