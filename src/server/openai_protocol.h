// OpenAI protocol, inbound half: the error envelope and the parsing of /v1/completions and
// /v1/chat/completions bodies into plain request structs, with every type checked and a clear
// message naming the field. Knows JSON and SamplingParams; must not touch the engine, the
// tokenizer or sockets (serving_*.cpp do), so all of it is unit-testable on strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "core/sampling_params.h"
#include "server/chat_tools.h"
#include "server/http_types.h"

namespace kvasir::server {

// The OpenAI error envelope: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// Maps a Status to its HTTP status and OpenAI error type; guesses `param` from messages that
// name their field ("'top_p' must be ..." or "top_p must be ...").
ApiError api_error_from_status(const Status& status);
// The envelope's body. Its message is capped_error_message(e.message).
Json error_body(const ApiError& e);
// Error text can quote what a client sent (a template's raise_exception(), a path); an answer must
// not grow with it: past kMaxErrorMessageBytes the text is cut (at a UTF-8 character boundary)
// and says so. Every error the server writes goes through this.
constexpr size_t kMaxErrorMessageBytes = 1024;
std::string capped_error_message(std::string_view message);
http::Response error_response(const ApiError& e);
http::Response json_response(int status, const Json& body);

// Parses a request body that must be one JSON object (limits sized for HTTP bodies).
StatusOr<Json> parse_json_object_body(const std::string& body);

struct PromptSpec {
  std::string text;                // when !is_tokens
  std::vector<int32_t> token_ids;  // when is_tokens
  bool is_tokens = false;
};

// Fields every generation request shares.
struct GenerationRequestBase {
  std::string model;  // empty when the client sent none
  SamplingParams params;
  bool max_tokens_set = false;  // max_tokens / max_completion_tokens given (else: fill the context)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats (vLLM)
  int priority = 0;                      // vLLM: lower runs first under --scheduling-policy priority
  std::optional<std::string> cache_salt;  // vLLM: isolates this request's prefix-cache entries
};

struct CompletionRequest : GenerationRequestBase {
  std::vector<PromptSpec> prompts;
  bool echo = false;
  bool add_special_tokens = true;
  // echo with max_tokens 0 (how scoring harnesses read prompt logprobs): the engine runs the
  // prompt with one sampled token that the answer drops; text and logprobs are the prompt's.
  bool score_prompt_only = false;
  bool prompt_logprobs_asked = false;  // the client set prompt_logprobs (not only echo's implied one)
};

struct ChatRequest : GenerationRequestBase {
  Json messages;    // content-part lists already joined into strings
  ChatTools tools;  // tools, tool_choice, parallel_tool_calls
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  bool logprobs = false;  // the chat "logprobs": true flag (top_logprobs lands in params)
  std::optional<std::string> chat_template;  // per-request template (trusted servers only)
  Json chat_template_kwargs;  // null or an object
};

constexpr size_t kMaxPromptsPerRequest = 1024;

// vLLM's scheduling fields every generation request takes: priority and cache_salt.
Status parse_scheduling_fields(const Json& body, GenerationRequestBase* out);

// `defaults` are the server's sampling defaults (generation config) that fields override.
Status parse_completion_request(const Json& body, const SamplingParams& defaults, CompletionRequest* out);
Status parse_chat_request(const Json& body, const SamplingParams& defaults, ChatRequest* out);

// OpenAI messages -> what chat templates expect: each message an object with a string role;
// content a string, null (rendered as ""), or a list of parts whose text parts are joined with
// "\n" (vLLM's "string" content format). Non-text parts are refused. An assistant message's
// tool_calls get their arguments parsed from JSON text into objects, as vLLM hands them to
// templates. Other keys pass through.
StatusOr<Json> normalize_chat_messages_for_template(const Json& messages);

// Reads an "ids" field that must be a list of integer token ids (range-checked later).
Status parse_token_list(const Json& v, const char* field, std::vector<int32_t>* out);

}  // namespace kvasir::server
