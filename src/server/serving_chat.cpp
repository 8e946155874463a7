// POST /v1/chat/completions: messages -> chat template -> one prompt -> n "chat.completion"
// choices; streaming sends each choice's role first, then content deltas, then its finish. With
// tools or a reasoning parser each choice's text goes through a ChatOutputParser into reasoning,
// content and tool_calls (deltas when streaming).
#include <map>

#include "common/check.h"
#include "server/chat_output_parser.h"
#include "server/serving_chat_template.h"
#include "server/serving_handlers.h"
#include "server/serving_job.h"

namespace kvasir::server {
namespace {

class ChatJob final : public GenerationJob {
 public:
  ChatJob(ServingContext& ctx, std::shared_ptr<http::Reply> reply, const ChatRequest& req, ReasoningContext reasoning)
      : GenerationJob(ctx, std::move(reply), make_request_id("chatcmpl-"), req),
        logprobs_(req.logprobs),
        num_top_(req.params.logprobs.value_or(0)),
        tools_(req.tools),
        reasoning_(std::move(reasoning)),
        parse_output_(output_needs_parsing(ctx.options().output_parsers, req.tools)) {}

 protected:
  const char* object_name() const override { return "chat.completion"; }
  const char* chunk_object_name() const override { return "chat.completion.chunk"; }

  void on_stream_open() override {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Json delta = Json::object();
      delta.set("role", "assistant");
      delta.set("content", "");
      Json arr = Json::array();
      arr.push_back(make_choice(static_cast<int>(i), std::move(delta), Json(), Json(), Json()));
      send_chunk(std::move(arr));
    }
  }

  Json chunk_choice(int index, Choice& c, const RequestOutput& d) override {
    Json delta = Json::object();
    Json finish_reason = d.finished ? Json(c.finish_reason) : Json();
    if (parse_output_) {
      ChatOutputParser& parser = stream_parser(index);
      OutputDelta od = parser.add(d.text, d.finished);
      if (!od.reasoning.empty()) {
        // vLLM's current name, and the one it used before (still what many clients read).
        delta.set("reasoning", od.reasoning);
        delta.set("reasoning_content", od.reasoning);
      }
      if (!od.content.empty()) delta.set("content", od.content);
      if (!od.tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCallDelta& t : od.tool_calls) calls.push_back(t.to_json());
        delta.set("tool_calls", std::move(calls));
      }
      if (d.finished) finish_reason = parser.finish_reason(c.finish_reason);
    } else if (!d.text.empty() || !d.logprobs.empty()) {
      delta.set("content", d.text);
    }
    if (delta.size() == 0 && d.logprobs.empty() && !d.finished) return Json();
    Json lp;
    if (logprobs_ && !d.logprobs.empty()) lp = chat_logprobs_json(tok_, d.logprobs, num_top_);
    return make_choice(index, std::move(delta), std::move(lp), std::move(finish_reason),
                       d.finished ? c.stop_reason : Json());
  }

  Json final_choice(int index, Choice& c) override {
    Json msg = Json::object();
    msg.set("role", "assistant");
    std::string finish_reason = c.finish_reason;
    if (parse_output_) {
      std::unique_ptr<ChatOutputParser> parser = make_parser();
      ParsedOutput out = parser->parse(c.text);
      msg.set("content", out.content ? Json(*out.content) : Json());
      msg.set("refusal", Json());
      if (parser->has_reasoning_parser()) {
        msg.set("reasoning", out.reasoning ? Json(*out.reasoning) : Json());
        msg.set("reasoning_content", out.reasoning ? Json(*out.reasoning) : Json());
      }
      Json calls = Json::array();
      for (const ToolCall& t : out.tool_calls) calls.push_back(t.to_json());
      msg.set("tool_calls", std::move(calls));
      finish_reason = parser->finish_reason(c.finish_reason);
    } else {
      msg.set("content", c.text);
      msg.set("refusal", Json());
      msg.set("tool_calls", Json::array());
    }
    Json lp;
    if (logprobs_) lp = chat_logprobs_json(tok_, c.logprobs, num_top_);
    Json o = Json::object();
    o.set("index", index);
    o.set("message", std::move(msg));
    o.set("logprobs", std::move(lp));
    o.set("finish_reason", finish_reason);
    o.set("stop_reason", c.stop_reason);
    return o;
  }

 private:
  static Json make_choice(int index, Json delta, Json logprobs, Json finish_reason, Json stop_reason) {
    Json o = Json::object();
    o.set("index", index);
    o.set("delta", std::move(delta));
    o.set("logprobs", std::move(logprobs));
    o.set("finish_reason", std::move(finish_reason));
    if (!stop_reason.is_null()) o.set("stop_reason", std::move(stop_reason));
    return o;
  }

  std::unique_ptr<ChatOutputParser> make_parser() const {
    auto p = ChatOutputParser::create(ctx_.options().output_parsers, tools_, reasoning_);
    // The handler built one from the same inputs before launching.
    KVASIR_CHECK_MSG(p.ok(), p.status().message().c_str());
    return std::move(*p);
  }

  ChatOutputParser& stream_parser(int index) {
    auto& p = stream_parsers_[index];
    if (!p) p = make_parser();
    return *p;
  }

  bool logprobs_;
  int num_top_;
  ChatTools tools_;
  ReasoningContext reasoning_;
  bool parse_output_;
  std::map<int, std::unique_ptr<ChatOutputParser>> stream_parsers_;  // per choice
};

}  // namespace

Status prepare_tool_output(const ServingContext& ctx, const ChatTools& tools, SamplingParams* params) {
  const OutputParserConfig& parsers = ctx.options().output_parsers;
  KVASIR_RETURN_IF_ERROR(check_tool_choice_supported(tools, parsers.auto_tools()));
  // Fails here (a 400) rather than in the job: the job builds its parsers from the same inputs.
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<ChatOutputParser> parser, ChatOutputParser::create(parsers, tools));
  KVASIR_ASSIGN_OR_RETURN(std::optional<StructuredOutputSpec> forced, tool_choice_structured_output(tools));
  // vLLM: the tool schema wins over response_format.
  if (forced) params->structured_outputs = std::move(*forced);
  // Parsers whose markers are special tokens must see them (vLLM's adjust_request).
  if (parser->needs_special_tokens()) params->skip_special_tokens = false;
  return Status();
}

ApiError model_not_found_error(const Status& s) {
  ApiError e = api_error_from_status(s);
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

Status check_messages_fit(const ServingContext& ctx, const Json& messages) {
  size_t num_bytes = 0;
  if (messages.is_array()) {
    for (const Json& m : messages.as_array()) {
      const Json* content = m.is_object() ? m.find("content") : nullptr;
      if (content != nullptr && content->is_string()) num_bytes += content->as_string().size();
    }
  }
  return ctx.check_prompt_bytes(num_bytes);
}

StatusOr<std::string> render_chat_request(const ServingContext& ctx, const ChatRequest& req) {
  KVASIR_RETURN_IF_ERROR(check_messages_fit(ctx, req.messages));
  const ChatTemplate* tmpl = ctx.chat_template();
  std::optional<ChatTemplate> own;
  if (req.chat_template) {
    if (!ctx.options().trust_request_chat_template) {
      return invalid_argument(
          "Chat template is passed with request, but --trust-request-chat-template is not set. "
          "Refused request with untrusted chat template.");
    }
    KVASIR_ASSIGN_OR_RETURN(own, ChatTemplate::parse(*req.chat_template));
    tmpl = &*own;
  } else if (tmpl == nullptr) {
    return invalid_argument("This server has no usable chat template (" + ctx.chat_template_error() +
                            "); start it with --chat-template or use /v1/completions.");
  }
  ChatRenderInput in;
  in.messages = req.messages;
  in.tools = tools_for_template(req.tools, ctx.options().exclude_tools_when_tool_choice_none);
  in.add_generation_prompt = req.add_generation_prompt;
  in.continue_final_message = req.continue_final_message;
  in.kwargs = req.chat_template_kwargs;
  return render_chat_prompt(*tmpl, ctx.tokenizer(), in);
}

void serve_chat_completions(ServingContext& ctx, const http::Request& hreq, std::shared_ptr<http::Reply> reply) {
  auto fail = [&](const Status& s) { reply->respond(error_response(api_error_from_status(s))); };
  auto body = parse_json_object_body(hreq.body);
  if (!body.ok()) return fail(body.status());
  ChatRequest req;
  if (Status st = parse_chat_request(*body, ctx.options().default_params, &req); !st.ok()) return fail(st);
  if (Status st = ctx.check_model(req.model); !st.ok()) return reply->respond(error_response(model_not_found_error(st)));
  if (Status st = prepare_tool_output(ctx, req.tools, &req.params); !st.ok()) return fail(st);
  auto prompt = render_chat_request(ctx, req);
  if (!prompt.ok()) return fail(prompt.status());
  auto ids = ctx.tokenize_prompt(*prompt, req.add_special_tokens);
  if (!ids.ok()) return fail(ids.status());
  auto prepared = prepare_prompt(ctx, req, std::move(*ids));
  if (!prepared.ok()) return fail(prepared.status());
  std::vector<PreparedPrompt> prompts;
  prompts.push_back(std::move(*prepared));
  auto job = std::make_shared<ChatJob>(ctx, reply, req, ReasoningContext::of(req.chat_template_kwargs, *prompt));
  launch_generation(ctx, job, std::move(prompts), *reply);
}

}  // namespace kvasir::server
