#include "bench_serve/openai_request.h"

#include <vector>

#include "bench_serve/http_response_parser.h"
#include "bench_serve/sse.h"

namespace kvasir::bench {
namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A chunk's text: choices[0].text (completions) or choices[0].delta.content
// (chat); a chat chunk carrying only the role, or reasoning text, counts as
// content only when non-empty.
std::optional<std::string> chunk_text(const Json &choice, bool chat) {
  if (!chat) {
    const Json *t = choice.find("text");
    return t && t->is_string() ? std::optional<std::string>(t->as_string())
                               : std::nullopt;
  }
  const Json *delta = choice.find("delta");
  if (!delta || !delta->is_object())
    return std::nullopt;
  std::string out;
  for (const char *key : {"reasoning_content", "content"}) {
    if (const Json *c = delta->find(key); c && c->is_string())
      out += c->as_string();
  }
  return out;
}

} // namespace

std::string build_request_body(const RequestConfig &cfg,
                               const BenchRequest &req) {
  Json body = Json::object();
  if (!cfg.model.empty())
    body.set("model", cfg.model);
  if (cfg.chat()) {
    Json msg = Json::object();
    msg.set("role", "user");
    msg.set("content", req.prompt);
    Json msgs = Json::array();
    msgs.push_back(std::move(msg));
    body.set("messages", std::move(msgs));
  } else {
    body.set("prompt", req.prompt);
  }
  body.set("max_tokens", req.output_len);
  if (cfg.temperature)
    body.set("temperature", *cfg.temperature);
  body.set("stream", true);
  Json so = Json::object();
  so.set("include_usage", true);
  body.set("stream_options", std::move(so));
  if (cfg.ignore_eos)
    body.set("ignore_eos", true);
  if (cfg.extra_body.is_object()) {
    for (const auto &[k, v] : cfg.extra_body.as_object())
      body.set(k, v);
  }
  return body.dump();
}

Status apply_stream_data(std::string_view data, bool chat,
                         Clock::time_point now, StreamState *st,
                         RequestResult *r) {
  if (data == "[DONE]") {
    st->done = true;
    return Status();
  }
  auto j = parse_json(data);
  if (!j.ok())
    return invalid_argument("bad JSON in stream: " + j.status().message());
  if (!j->is_object())
    return invalid_argument("stream chunk is not a JSON object");
  if (const Json *e = j->find("error"); e && !e->is_null())
    return unavailable("error in stream: " + e->dump());
  if (const Json *choices = j->find("choices");
      choices && choices->is_array() && choices->size() > 0) {
    std::optional<std::string> text = chunk_text(choices->as_array()[0], chat);
    if (text && !text->empty()) {
      if (!st->first_chunk_seen) {
        st->first_chunk_seen = true;
        r->ttft_s = seconds(now - st->start);
      } else {
        r->itl_s.push_back(seconds(now - st->last_chunk));
      }
      st->last_chunk = now;
      ++st->num_content_chunks;
      r->generated_text += *text;
    }
  }
  if (const Json *u = j->find("usage"); u && u->is_object()) {
    if (const Json *c = u->find("completion_tokens"); c && c->is_int()) {
      r->output_tokens = c->as_int();
      r->output_tokens_from_usage = true;
    }
    if (const Json *p = u->find("prompt_tokens");
        p && p->is_int() && p->as_int() > 0)
      r->prompt_len = p->as_int();
  }
  return Status();
}

RequestResult run_request(const RequestConfig &cfg, const BenchRequest &req) {
  RequestResult r;
  r.prompt_len = req.prompt_len;
  r.expected_output_len = req.output_len;
  const std::string wire = build_post_request(
      cfg.url, cfg.endpoint, build_request_body(cfg, req),
      cfg.api_key.empty()
          ? std::vector<std::string>{}
          : std::vector<std::string>{"Authorization: Bearer " + cfg.api_key});
  StreamState st;
  st.start = Clock::now();
  const auto deadline =
      st.start + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(cfg.timeout_s));
  auto fail = [&r](std::string message) {
    r.success = false;
    r.error = std::move(message);
    return r;
  };
  auto conn = HttpConnection::connect(cfg.url.host, cfg.url.port, deadline);
  if (!conn.ok())
    return fail(conn.status().message());
  if (Status s = conn->send_all(wire, deadline); !s.ok())
    return fail(s.message());

  ResponseParser parser;
  SseSplitter sse;
  std::vector<SseEvent> events;
  std::string body, error_body;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto n = conn->read_some(buf.data(), buf.size(), deadline);
    if (!n.ok())
      return fail(n.status().message());
    body.clear();
    const ResponseParser::Result pr =
        *n == 0 ? parser.finish()
                : parser.feed(std::string_view(buf.data(), *n), &body);
    if (pr == ResponseParser::Result::kError)
      return fail("bad HTTP response: " + parser.error_message());
    if (parser.headers_complete() && parser.status() != 200) {
      if (error_body.size() < 4096)
        error_body += body;
    } else if (!body.empty()) {
      events.clear();
      sse.feed(body, &events);
      // Each event is timestamped as it is handled, as vLLM's client stamps each chunk it
      // iterates: events that arrived in one read (a client descheduled while the server
      // streamed) then show tiny gaps rather than exactly zero.
      for (const SseEvent &e : events) {
        if (Status s = apply_stream_data(e.data, cfg.chat(), Clock::now(), &st, &r);
            !s.ok())
          return fail(s.message());
      }
    }
    if (pr == ResponseParser::Result::kComplete)
      break;
    if (*n == 0)
      return fail("connection closed before the end of the response");
  }
  if (parser.status() != 200)
    return fail("HTTP " + std::to_string(parser.status()) + ": " +
                error_body.substr(0, 512));
  if (!st.first_chunk_seen)
    return fail("never received a content chunk to measure TTFT");
  r.latency_s = seconds(st.last_chunk - st.start);
  if (!r.output_tokens_from_usage)
    r.output_tokens = st.num_content_chunks;
  r.success = true;
  return r;
}

} // namespace kvasir::bench
