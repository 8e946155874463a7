#include "server/serving_job.h"

#include <algorithm>
#include <chrono>

namespace kvasir::server {

GenerationJob::GenerationJob(ServingContext& ctx, std::shared_ptr<http::Reply> reply, std::string id,
                             const GenerationRequestBase& req)
    : ctx_(ctx),
      tok_(ctx.tokenizer()),
      reply_(std::move(reply)),
      id_(std::move(id)),
      model_(req.model.empty() ? ctx.model_name() : req.model),
      created_(unix_time_s()),
      streaming_(req.stream),
      include_usage_(req.include_usage),
      continuous_usage_(req.include_usage && req.continuous_usage_stats),
      n_(std::max(1, req.params.n)) {
  add_options_.priority = req.priority;
  add_options_.cache_salt = req.cache_salt;
  if (!ctx.options().output_parsers.reasoning_parser.empty()) {
    // As vLLM: with a reasoning parser a grammar (structured output, forced tool calls) applies
    // after the reasoning, from the tokens of "</think>" (the end marker of every parser here), or
    // at once when the prompt already closed it (a template with thinking off).
    add_options_.grammar_starts_after = ctx.tokenizer().encode("</think>", /*add_special_tokens=*/false);
  }
}

GenerationJob::~GenerationJob() = default;

Status GenerationJob::add_prompt(std::vector<int32_t> prompt_ids, std::string prompt_text, const SamplingParams& params) {
  Sub s;
  s.engine_id = id_ + "-" + std::to_string(subs_.size());
  KVASIR_ASSIGN_OR_RETURN(s.stream, ctx_.engine().add_request(s.engine_id, prompt_ids, params, add_options_));
  s.prompt_ids = std::move(prompt_ids);
  s.prompt_text = std::move(prompt_text);
  for (int i = 0; i < n_; ++i) {
    Choice c;
    c.sub = subs_.size();
    choices_.push_back(std::move(c));
  }
  subs_.push_back(std::move(s));
  return Status();
}

void GenerationJob::launch() {
  launched_ = true;
  if (!streaming_) return;
  stream_ = reply_->stream();
  stream_->start(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}});
  on_stream_open();
}

void GenerationJob::cancel() {
  abort_engine_requests();
  end();
}

void GenerationJob::abort_engine_requests() {
  for (const Sub& s : subs_) ctx_.engine().abort(s.engine_id);
}

void GenerationJob::attach(const PumpBell& bell) {
  for (const Sub& s : subs_) s.stream->notify_on_ready(bell.queue, bell.token);
  reply_->notify_when_gone(bell.queue, bell.token);
}

bool GenerationJob::client_gone() const { return (stream_ && stream_->closed()) || reply_->client_gone(); }

PumpTask::Progress GenerationJob::poll() {
  if (done_) return Progress::kDone;
  if (client_gone()) {
    abort_engine_requests();
    ctx_.num_aborted_by_client.fetch_add(1);
    // The transport drops what we write now; answering still lets it release the request.
    if (stream_) {
      stream_->finish();
    } else {
      reply_->respond(error_response({499, "client closed the connection", "invalid_request_error", "", ""}));
    }
    end();
    return Progress::kDone;
  }
  for (size_t s = 0; s < subs_.size() && !failed_; ++s) {
    RequestOutput d;
    while (!failed_ && subs_[s].stream->try_next(&d)) handle_delta(s, d);
  }
  if (failed_) {
    fail(failure_);
    return Progress::kDone;
  }
  const bool all_done = std::all_of(subs_.begin(), subs_.end(), [](const Sub& s) { return s.stream->done(); });
  if (all_done) {
    complete();
    return Progress::kDone;
  }
  return Progress::kWaiting;  // the next delta or a hang-up rings the pump
}

void GenerationJob::handle_delta(size_t sub, RequestOutput& d) {
  const size_t ci = sub * static_cast<size_t>(n_) + static_cast<size_t>(std::max(0, d.index));
  if (d.index < 0 || d.index >= n_ || ci >= choices_.size()) return;
  Choice& c = choices_[ci];
  if (!c.started) {
    c.started = true;
    if (released_ < admitted_) {
      ++released_;
      ctx_.release_waiting(1);
    }
  }
  if (count_output_tokens_) c.num_output_tokens = std::max(c.num_output_tokens, d.num_output_tokens);
  c.num_cached_tokens = std::max(c.num_cached_tokens, d.num_cached_tokens);
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
  if (d.finished) {
    if (d.finish_reason == "error") {
      failed_ = true;
      failure_ = {500, "The engine failed this request: " + d.error_message, "server_error", "", "internal_error"};
      return;
    }
    if (d.finish_reason == "abort") {
      failed_ = true;
      failure_ = {503,
                  ctx_.shutting_down() ? "The server is shutting down; the request was aborted."
                                       : "The request was aborted by the engine.",
                  "server_error", "", "service_unavailable"};
      return;
    }
    c.finish_reason = d.finish_reason;
    if (d.stop_reason_str) {
      c.stop_reason = *d.stop_reason_str;
    } else if (d.stop_reason_token) {
      c.stop_reason = static_cast<int64_t>(*d.stop_reason_token);
    }
  }
  if (streaming_) {
    stream_delta(static_cast<int>(ci), c, d);
  } else {
    c.text += d.text;
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
}

void GenerationJob::stream_delta(int index, Choice& c, const RequestOutput& d) {
  Json choice = chunk_choice(index, c, d);
  if (choice.is_null()) return;
  Json arr = Json::array();
  arr.push_back(std::move(choice));
  send_chunk(std::move(arr), continuous_usage_ ? usage_so_far() : Json());
  c.sent_first = true;
}

void GenerationJob::stream_complete() {
  if (include_usage_) send_chunk(Json::array(), usage_so_far());
  stream_->write(kSseDone);
}

void GenerationJob::stream_fail(const ApiError& e) {
  // Headers already went out with 200: the error travels as an event, as vLLM does.
  stream_->write(sse_event(error_body(e)));
  stream_->write(kSseDone);
}

Json GenerationJob::final_body() {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) choices.push_back(final_choice(static_cast<int>(i), choices_[i]));
  return response_envelope(id_, object_name(), created_, model_, std::move(choices), usage_so_far());
}

void GenerationJob::send_chunk(Json choices, Json usage) {
  stream_->write(sse_event(response_envelope(id_, chunk_object_name(), created_, model_, std::move(choices), std::move(usage))));
}

Json GenerationJob::usage_so_far() const {
  int64_t prompt = 0, completion = 0;
  for (const Sub& s : subs_) prompt += static_cast<int64_t>(s.prompt_ids.size());
  for (const Choice& c : choices_) completion += c.num_output_tokens;
  return usage_json(prompt, completion);
}

void GenerationJob::complete() {
  if (streaming_) {
    stream_complete();
    stream_->finish();
  } else {
    reply_->respond(json_response(200, final_body()));
  }
  end();
}

void GenerationJob::fail(const ApiError& e) {
  abort_engine_requests();
  if (streaming_) {
    stream_fail(e);
    stream_->finish();
  } else {
    reply_->respond(error_response(e));
  }
  end();
}

void GenerationJob::end() {
  if (done_) return;
  done_ = true;
  if (admitted_ > released_) ctx_.release_waiting(admitted_ - released_);
  released_ = admitted_;
  if (launched_) ctx_.finish_job(this);
}

namespace {

StatusOr<SamplingParams> params_for_prompt(const ServingContext& ctx, const GenerationRequestBase& req,
                                           const std::vector<int32_t>& prompt_ids) {
  // The engine's own validator: the same rules and messages add_request applies, answered here
  // as a 400 before anything is launched.
  const RequestValidator& validator = ctx.validator();
  KVASIR_RETURN_IF_ERROR(validator.check_prompt(prompt_ids));
  SamplingParams p = req.params;
  if (!req.max_tokens_set) {
    p.max_tokens = validator.limits().max_model_len - static_cast<int>(prompt_ids.size());
    if (ctx.options().default_max_tokens) p.max_tokens = std::min(p.max_tokens, *ctx.options().default_max_tokens);
  }
  KVASIR_RETURN_IF_ERROR(validator.check(prompt_ids, p));
  return p;
}

}  // namespace

StatusOr<PreparedPrompt> prepare_prompt(const ServingContext& ctx, const GenerationRequestBase& req,
                                        std::vector<int32_t> token_ids) {
  PreparedPrompt p;
  p.token_ids = std::move(token_ids);
  KVASIR_ASSIGN_OR_RETURN(p.params, params_for_prompt(ctx, req, p.token_ids));
  return p;
}

void launch_generation(ServingContext& ctx, const std::shared_ptr<GenerationJob>& job,
                       std::vector<PreparedPrompt> prompts, http::Reply& reply) {
  int64_t num_sequences = 0;
  for (const PreparedPrompt& p : prompts) num_sequences += std::max(1, p.params.n);
  // Every sequence counts (prompts x n; best_of must equal n), so the bound holds whatever shape
  // the request has: 429 while the queue lacks room, 400 when the request alone exceeds it.
  if (Status st = ctx.try_admit(num_sequences); !st.ok()) {
    http::Response r = error_response(api_error_from_status(st));
    if (st.code() == StatusCode::kResourceExhausted) r.headers.emplace_back("Retry-After", "1");
    reply.respond(std::move(r));
    return;
  }
  job->set_admitted(num_sequences);
  for (PreparedPrompt& p : prompts) {
    Status st = job->add_prompt(std::move(p.token_ids), std::move(p.text), p.params);
    if (!st.ok()) {
      job->cancel();
      reply.respond(error_response(api_error_from_status(st)));
      return;
    }
  }
  job->launch();
  ctx.start_job(job);
}

}  // namespace kvasir::server
