// POST /v1/completions: prompts (text or token ids, one or many) -> "text_completion" choices,
// index = prompt * n + sample, with legacy logprobs and echo.
#include "server/serving_handlers.h"
#include "server/serving_job.h"

namespace kvasir::server {
namespace {

class CompletionJob final : public GenerationJob {
 public:
  CompletionJob(ServingContext& ctx, std::shared_ptr<http::Reply> reply, const CompletionRequest& req)
      : GenerationJob(ctx, std::move(reply), make_request_id("cmpl-"), req),
        echo_(req.echo),
        score_only_(req.score_prompt_only),
        num_prompt_top_(req.prompt_logprobs_asked ? req.params.prompt_logprobs.value_or(-1) : -1),
        want_logprobs_(req.params.logprobs.has_value()) {
    if (score_only_) count_output_tokens_ = false;
  }

 protected:
  const char* object_name() const override { return "text_completion"; }
  const char* chunk_object_name() const override { return "text_completion"; }

  Json chunk_choice(int index, Choice& c, const RequestOutput& d) override {
    if (score_only_) {
      // Only the prompt goes out, once, when the request ends; the sampled token is dropped.
      if (!d.finished) return Json();
      Json lp;
      if (want_logprobs_) {
        add_prompt_logprobs(c.stream_logprobs, c);
        lp = c.stream_logprobs.take();
      }
      Json o = make_choice(index, subs_[c.sub].prompt_text, std::move(lp), Json("length"), Json());
      add_prompt_logprobs_field(o, c);
      return o;
    }
    std::string text;
    if (!c.sent_first && echo_) {
      // Prompt logprobs may arrive over several prefill steps: echo once generation starts.
      if (d.token_ids.empty() && !d.finished) return Json();
      text = subs_[c.sub].prompt_text;
      if (want_logprobs_) add_prompt_logprobs(c.stream_logprobs, c);
    }
    text += d.text;
    Json lp;
    if (want_logprobs_) {
      for (const PositionLogprobs& p : d.logprobs) c.stream_logprobs.add(tok_, p);
      if (!c.stream_logprobs.empty()) lp = c.stream_logprobs.take();
    }
    if (text.empty() && lp.is_null() && !d.finished) return Json();
    Json o = make_choice(index, std::move(text), std::move(lp), d.finished ? Json(c.finish_reason) : Json(),
                         d.finished ? c.stop_reason : Json());
    if (!c.sent_first) add_prompt_logprobs_field(o, c);
    return o;
  }

  Json final_choice(int index, Choice& c) override {
    if (score_only_) {
      Json lp;
      if (want_logprobs_) {
        CompletionLogprobs b;
        add_prompt_logprobs(b, c);
        lp = b.take();
      }
      Json o = make_choice(index, subs_[c.sub].prompt_text, std::move(lp), Json("length"), Json());
      add_prompt_logprobs_field(o, c);
      return o;
    }
    std::string text = echo_ ? subs_[c.sub].prompt_text + c.text : c.text;
    Json lp;
    if (want_logprobs_) {
      CompletionLogprobs b;
      if (echo_) add_prompt_logprobs(b, c);
      for (const PositionLogprobs& p : c.logprobs) b.add(tok_, p);
      lp = b.take();
    }
    Json o = make_choice(index, std::move(text), std::move(lp), Json(c.finish_reason), c.stop_reason);
    add_prompt_logprobs_field(o, c);
    return o;
  }

 private:
  // vLLM sends prompt_logprobs with a choice's first content (streaming) or in its final object.
  void add_prompt_logprobs_field(Json& choice, const Choice& c) const {
    if (num_prompt_top_ < 0) return;
    choice.set("prompt_logprobs", prompt_logprobs_json(tok_, c.prompt_logprobs, num_prompt_top_));
  }

  static Json make_choice(int index, std::string text, Json logprobs, Json finish_reason, Json stop_reason) {
    Json o = Json::object();
    o.set("index", index);
    o.set("text", std::move(text));
    o.set("logprobs", std::move(logprobs));
    o.set("finish_reason", std::move(finish_reason));
    o.set("stop_reason", std::move(stop_reason));
    return o;
  }

  // The echoed prompt's entries: its first token has no logprob; the rest come from the engine.
  void add_prompt_logprobs(CompletionLogprobs& b, const Choice& c) const {
    const Sub& s = subs_[c.sub];
    if (s.prompt_ids.empty()) return;
    b.add_unscored(tok_, s.prompt_ids[0]);
    for (const PositionLogprobs& p : c.prompt_logprobs) b.add(tok_, p);
    b.set_offset(s.prompt_text.size());
  }

  bool echo_;
  bool score_only_;
  int num_prompt_top_;  // -1: prompt_logprobs not asked
  bool want_logprobs_;
};

}  // namespace

void serve_completions(ServingContext& ctx, const http::Request& hreq, std::shared_ptr<http::Reply> reply) {
  auto fail = [&](const Status& s) { reply->respond(error_response(api_error_from_status(s))); };
  auto body = parse_json_object_body(hreq.body);
  if (!body.ok()) return fail(body.status());
  CompletionRequest req;
  if (Status st = parse_completion_request(*body, ctx.options().default_params, &req); !st.ok()) return fail(st);
  if (Status st = ctx.check_model(req.model); !st.ok()) return reply->respond(error_response(model_not_found_error(st)));

  const Tokenizer& tok = ctx.tokenizer();
  std::vector<PreparedPrompt> prompts;
  prompts.reserve(req.prompts.size());
  for (PromptSpec& spec : req.prompts) {
    std::vector<int32_t> ids;
    if (spec.is_tokens) {
      ids = std::move(spec.token_ids);
    } else {
      auto tokenized = ctx.tokenize_prompt(spec.text, req.add_special_tokens);
      if (!tokenized.ok()) return fail(tokenized.status());
      ids = std::move(*tokenized);
    }
    auto prepared = prepare_prompt(ctx, req, std::move(ids));
    if (!prepared.ok()) return fail(prepared.status());
    PreparedPrompt& p = *prepared;
    if (req.echo) p.text = spec.is_tokens ? tok.decode(p.token_ids, /*skip_special_tokens=*/false) : std::move(spec.text);
    prompts.push_back(std::move(p));
  }
  auto job = std::make_shared<CompletionJob>(ctx, reply, req);
  launch_generation(ctx, job, std::move(prompts), *reply);
}

}  // namespace kvasir::server
