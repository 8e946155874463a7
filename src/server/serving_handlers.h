// The OpenAI-compatible endpoint handlers. Those that read a body run on a HandlerPool thread: parse, validate,
// tokenize and enqueue, then return; generation results flow through the pump. Every handler
// answers its Reply exactly once (or hands it to a job that will). Routing and auth are
// routes.cpp's; these must not look at paths or headers beyond the body.
#pragma once

#include <memory>

#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/serving_context.h"

namespace kvasir::server {

void serve_completions(ServingContext& ctx, const http::Request& req, std::shared_ptr<http::Reply> reply);
void serve_chat_completions(ServingContext& ctx, const http::Request& req, std::shared_ptr<http::Reply> reply);
void serve_responses(ServingContext& ctx, const http::Request& req, std::shared_ptr<http::Reply> reply);
// GET / DELETE /v1/responses/{id}: a stored response.
http::Response serve_stored_response(ServingContext& ctx, const std::string& method, const std::string& id);
void serve_tokenize(ServingContext& ctx, const http::Request& req, http::Reply& reply);
void serve_detokenize(ServingContext& ctx, const http::Request& req, http::Reply& reply);
// GET /v1/models, or GET /v1/models/{id} when `model_id` is not empty.
http::Response serve_models(const ServingContext& ctx, const std::string& model_id);

// The chat prompt of a request: picks the template (per-request ones only when trusted) and
// renders it. Shared by chat completions and /tokenize.
StatusOr<std::string> render_chat_request(const ServingContext& ctx, const ChatRequest& req);
// The messages' text (string contents) checked against ctx.check_prompt_bytes before a template
// copies it around: an oversized chat is refused without rendering it.
Status check_messages_fit(const ServingContext& ctx, const Json& messages);
// The tool-calling half of a chat or responses request before it launches: the 400 for "auto"
// without a tool parser, the grammar that forces "required" / named calls (set on `params`), and
// special tokens kept when the tool parser reads them.
Status prepare_tool_output(const ServingContext& ctx, const ChatTools& tools, SamplingParams* params);
// 404 for an unknown model, with OpenAI's code and param.
ApiError model_not_found_error(const Status& s);

}  // namespace kvasir::server
