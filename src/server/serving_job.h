// GenerationJob: one /v1/completions, /v1/chat/completions or /v1/responses request in flight.
// Holds the engine requests of its prompts (n choices each), drains their RequestStreams without
// blocking when the pump polls it (each stream and the client's hang-up ring the pump), and either
// streams SSE events as deltas arrive or answers once with the whole result. A vanished client
// aborts the engine requests so their KV blocks free within a step. Subclasses only shape the
// JSON (of a choice, or of the stream's framing); they must not block or touch the pump.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/serving_context.h"

namespace kvasir::server {

class GenerationJob : public PumpTask {
 public:
  GenerationJob(ServingContext& ctx, std::shared_ptr<http::Reply> reply, std::string id,
                const GenerationRequestBase& req);
  ~GenerationJob() override;

  // The request holds `num` admitted sequences (ctx.try_admit); released as choices start.
  void set_admitted(int64_t num) { admitted_ = num; }
  // Queues one prompt (params.n choices). On error nothing of this prompt is queued.
  Status add_prompt(std::vector<int32_t> prompt_ids, std::string prompt_text, const SamplingParams& params);
  // After the last add_prompt: opens the event stream when streaming, then hands the job to the
  // pump. The job answers its client from then on.
  void launch();
  // Before launch, when a later prompt failed: ends what was queued (the caller answers).
  void cancel();
  // Ends every engine request of this job (client gone, shutdown, a failed sibling). Any thread.
  void abort_engine_requests();

  void attach(const PumpBell& bell) override;
  Progress poll() override;

 protected:
  struct Sub {
    std::string engine_id;
    std::shared_ptr<RequestStream> stream;
    std::vector<int32_t> prompt_ids;
    std::string prompt_text;
  };
  struct Choice {
    size_t sub = 0;
    std::string text;
    std::vector<PositionLogprobs> logprobs;
    std::vector<PositionLogprobs> prompt_logprobs;
    CompletionLogprobs stream_logprobs;  // completions streaming: keeps the text offset
    std::string finish_reason;           // empty while running
    Json stop_reason;                    // null, a token id or the stop string
    int32_t num_output_tokens = 0;
    int32_t num_cached_tokens = 0;
    bool started = false;     // got its first delta (no longer waiting for admission)
    bool sent_first = false;  // streaming: its first content chunk went out
  };

  virtual const char* object_name() const { return ""; }        // "text_completion" | "chat.completion"
  virtual const char* chunk_object_name() const { return ""; }  // "text_completion" | "chat.completion.chunk"
  // Streaming: chunks sent right after the stream opens (chat: the role of every choice).
  virtual void on_stream_open() {}
  // Streaming: the choice object for one delta, or null to send nothing for it.
  virtual Json chunk_choice(int /*index*/, Choice& /*c*/, const RequestOutput& /*d*/) { return Json(); }
  // Non-streaming: the finished choice.
  virtual Json final_choice(int /*index*/, Choice& /*c*/) { return Json(); }

  // The framing, for endpoints whose stream is not chat-completion chunks (/v1/responses):
  // Streaming: what one delta sends (default: chunk_choice's choice in a chunk).
  virtual void stream_delta(int index, Choice& c, const RequestOutput& d);
  // Streaming: how a completed stream ends (default: the usage chunk when asked, [DONE]).
  virtual void stream_complete();
  // Streaming: how a failed stream ends; headers went out with 200 (default: an error event, [DONE]).
  virtual void stream_fail(const ApiError& e);
  // Non-streaming: the 200 body (default: every final_choice in a response envelope with usage).
  virtual Json final_body();

  // Sends one chunk with these choices (and usage when not null).
  void send_chunk(Json choices, Json usage = Json());
  Json usage_so_far() const;

  ServingContext& ctx_;
  const Tokenizer& tok_;
  std::shared_ptr<http::Reply> reply_;
  std::shared_ptr<http::Stream> stream_;
  std::string id_;
  std::string model_;
  int64_t created_;
  bool streaming_;
  bool include_usage_;
  bool continuous_usage_;
  AddRequestOptions add_options_;
  bool count_output_tokens_ = true;  // false: usage reports no completion tokens (prompt scoring)
  int n_ = 1;
  std::vector<Sub> subs_;
  std::vector<Choice> choices_;

 private:
  void handle_delta(size_t sub, RequestOutput& d);
  void fail(const ApiError& e);
  void complete();
  void end();  // releases admission and leaves the registry
  bool client_gone() const;

  bool done_ = false;
  bool failed_ = false;
  bool launched_ = false;
  int64_t admitted_ = 0;
  int64_t released_ = 0;
  ApiError failure_;
};

struct PreparedPrompt {
  std::vector<int32_t> token_ids;
  std::string text;  // for echo
  SamplingParams params;
};

// A prompt's token ids with its sampling parameters: the prompt checked by the engine's
// RequestValidator, max_tokens defaulting to what is left of the context (capped by
// generation_config's max_new_tokens), then the whole request checked by the same validator.
StatusOr<PreparedPrompt> prepare_prompt(const ServingContext& ctx, const GenerationRequestBase& req,
                                        std::vector<int32_t> token_ids);

// Admits every sequence of the request (429 when the queue lacks room for them, 400 when they
// exceed the whole bound), queues every prompt and launches the job; answers the
// client itself on any error, so the caller is done after this.
void launch_generation(ServingContext& ctx, const std::shared_ptr<GenerationJob>& job,
                       std::vector<PreparedPrompt> prompts, http::Reply& reply);

}  // namespace kvasir::server
