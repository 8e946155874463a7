// POST /v1/responses (OpenAI's Responses API, as vLLM serves it without built-in tools): input
// items -> chat messages (after a stored previous response's conversation) -> chat template ->
// one generation, answered as a response object or as its typed event stream; the result is kept
// in the ResponseStore for previous_response_id and GET /v1/responses/{id}.
#include "common/check.h"
#include "server/chat_output_parser.h"
#include "server/responses_protocol.h"
#include "server/responses_stream.h"
#include "server/serving_chat_template.h"
#include "server/serving_handlers.h"
#include "server/serving_job.h"

namespace kvasir::server {
namespace {

class ResponsesJob final : public GenerationJob {
 public:
  ResponsesJob(ServingContext& ctx, std::shared_ptr<http::Reply> reply, const ResponsesRequest& req, Json conversation,
               ReasoningContext reasoning)
      : GenerationJob(ctx, std::move(reply), make_request_id("resp_"), req),
        echo_(req.echo),
        store_(req.store),
        tools_(req.tools),
        reasoning_(std::move(reasoning)),
        conversation_(std::move(conversation)),
        parser_(make_parser()) {}

 protected:
  void on_stream_open() override { stream_->write(events_.begin(response(state("in_progress", Json::array())))); }

  void stream_delta(int /*index*/, Choice& /*c*/, const RequestOutput& d) override {
    OutputDelta out = parser_->add(d.text, d.finished);
    if (!out.empty()) stream_->write(events_.add(out));
  }

  void stream_complete() override {
    std::string events = events_.finish_items();
    const Choice& c = choices_.front();
    ResponseState s = state(status_of(c), events_.output());
    s.usage = usage(c, events_.reasoning_text());
    Json r = response(s);
    save(r);  // before the client can see it finished and ask for it
    events += events_.end(r);
    stream_->write(events);
  }

  void stream_fail(const ApiError& e) override {
    ResponseState s = state("failed", events_.output());
    Json err = Json::object();
    err.set("code", e.status == 429 ? "rate_limit_exceeded" : "server_error");
    err.set("message", capped_error_message(e.message));
    s.error = std::move(err);
    stream_->write(events_.end(response(s)));
  }

  Json final_body() override {
    const Choice& c = choices_.front();
    ParsedOutput out = parser_->parse(c.text);
    ResponseState s = state(status_of(c), output_items(out));
    s.usage = usage(c, out.reasoning.value_or(""));
    Json r = response(s);
    save(r);
    return r;
  }

 private:
  std::unique_ptr<ChatOutputParser> make_parser() const {
    auto p = ChatOutputParser::create(ctx_.options().output_parsers, tools_, reasoning_);
    // serve_responses built one from the same inputs before launching.
    KVASIR_CHECK_MSG(p.ok(), p.status().message().c_str());
    return std::move(*p);
  }

  // vLLM: a generation cut by max_output_tokens is "incomplete".
  static const char* status_of(const Choice& c) { return c.finish_reason == "length" ? "incomplete" : "completed"; }

  ResponseState state(const char* status, Json output) const {
    // The item generation stopped in was cut short too (OpenAI marks it so).
    if (std::string(status) == "incomplete" && output.size() > 0) output.as_array().back().set("status", "incomplete");
    ResponseState s;
    s.id = id_;
    s.created_at = created_;
    s.model = model_;
    s.status = status;
    s.output = std::move(output);
    return s;
  }

  Json response(const ResponseState& s) const { return response_object(s, echo_); }

  Json usage(const Choice& c, const std::string& reasoning) const {
    ResponseUsage u;
    u.input_tokens = static_cast<int64_t>(subs_.front().prompt_ids.size());
    u.cached_tokens = c.num_cached_tokens;
    u.output_tokens = c.num_output_tokens;
    // Counted by re-encoding the reasoning text: close to the generated count, not exact.
    if (!reasoning.empty()) u.reasoning_tokens = static_cast<int64_t>(tok_.encode(reasoning, false).size());
    return response_usage_json(u);
  }

  void save(const Json& r) {
    if (store_) ctx_.response_store().put(id_, ResponseStore::Entry{conversation_, r});
  }

  Json echo_;
  bool store_;
  ChatTools tools_;
  ReasoningContext reasoning_;
  Json conversation_;  // the messages before this response, for a later previous_response_id
  std::unique_ptr<ChatOutputParser> parser_;
  ResponseEventStream events_;
};

}  // namespace

void serve_responses(ServingContext& ctx, const http::Request& hreq, std::shared_ptr<http::Reply> reply) {
  auto fail = [&](const Status& s) { reply->respond(error_response(api_error_from_status(s))); };
  auto body = parse_json_object_body(hreq.body);
  if (!body.ok()) return fail(body.status());
  ResponsesRequest req;
  if (Status st = parse_responses_request(*body, ctx.options().default_params, &req); !st.ok()) return fail(st);
  if (Status st = ctx.check_model(req.model); !st.ok()) return reply->respond(error_response(model_not_found_error(st)));

  // The conversation: the previous response's (its messages, then its output), then this input.
  // Instructions belong to one request only (OpenAI): they are not part of what is stored.
  Json conversation = Json::array();
  if (!req.previous_response_id.empty()) {
    std::optional<ResponseStore::Entry> prev = ctx.response_store().get(req.previous_response_id);
    if (!prev) return reply->respond(error_response(response_not_found_error(req.previous_response_id, "previous_response_id")));
    for (const Json& m : prev->messages.as_array()) conversation.push_back(m);
    const Json* output = prev->response.find("output");
    if (output && output->is_array()) {
      if (Status st = responses_items_to_messages(*output, /*skip_reasoning=*/true, &conversation); !st.ok()) return fail(st);
    }
  }
  for (const Json& m : req.input.as_array()) conversation.push_back(m);
  Json messages = Json::array();
  if (req.instructions) {
    Json sys = Json::object();
    sys.set("role", "system");
    sys.set("content", *req.instructions);
    messages.push_back(std::move(sys));
  }
  for (const Json& m : conversation.as_array()) messages.push_back(m);

  if (Status st = prepare_tool_output(ctx, req.tools, &req.params); !st.ok()) return fail(st);
  // text.format constrains the output unless a forced tool call already does (vLLM: tools win).
  if (req.text_format && !req.params.structured_outputs) req.params.structured_outputs = req.text_format;

  const ChatTemplate* tmpl = ctx.chat_template();
  if (tmpl == nullptr) {
    return fail(invalid_argument("This server has no usable chat template (" + ctx.chat_template_error() +
                                 "); start it with --chat-template or use /v1/completions."));
  }
  if (Status st = check_messages_fit(ctx, messages); !st.ok()) return fail(st);
  ChatRenderInput in;
  auto normalized = normalize_chat_messages_for_template(messages);
  if (!normalized.ok()) return fail(normalized.status());
  in.messages = std::move(*normalized);
  in.tools = tools_for_template(req.tools, ctx.options().exclude_tools_when_tool_choice_none);
  in.kwargs = req.chat_template_kwargs;
  auto prompt = render_chat_prompt(*tmpl, ctx.tokenizer(), in);
  if (!prompt.ok()) return fail(prompt.status());

  auto ids = ctx.tokenize_prompt(*prompt, /*add_special_tokens=*/false);
  if (!ids.ok()) return fail(ids.status());
  auto prepared = prepare_prompt(ctx, req, std::move(*ids));
  if (!prepared.ok()) return fail(prepared.status());
  std::vector<PreparedPrompt> prompts;
  prompts.push_back(std::move(*prepared));
  auto job = std::make_shared<ResponsesJob>(ctx, reply, req, std::move(conversation),
                                            ReasoningContext::of(req.chat_template_kwargs, *prompt));
  launch_generation(ctx, job, std::move(prompts), *reply);
}

http::Response serve_stored_response(ServingContext& ctx, const std::string& method, const std::string& id) {
  if (method == "DELETE") {
    if (!ctx.response_store().erase(id)) return error_response(response_not_found_error(id, "response_id"));
    Json o = Json::object();
    o.set("id", id);
    o.set("object", "response");
    o.set("deleted", true);
    return json_response(200, o);
  }
  std::optional<ResponseStore::Entry> e = ctx.response_store().get(id);
  if (!e) return error_response(response_not_found_error(id, "response_id"));
  return json_response(200, e->response);
}

}  // namespace kvasir::server
