#include "core/request.h"

#include <utility>

namespace kvasir {

const char* request_status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinishedStopped: return "finished_stopped";
    case RequestStatus::kFinishedLength: return "finished_length";
    case RequestStatus::kFinishedAborted: return "finished_aborted";
    case RequestStatus::kFinishedError: return "finished_error";
  }
  return "unknown";
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

std::optional<FinishReason> finish_reason_of(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped: return FinishReason::kStop;
    case RequestStatus::kFinishedLength: return FinishReason::kLength;
    case RequestStatus::kFinishedAborted: return FinishReason::kAbort;
    case RequestStatus::kFinishedError: return FinishReason::kError;
    default: return std::nullopt;
  }
}

Request::Request(std::string req_id, std::vector<TokenId> prompt_token_ids,
                 SamplingParams sampling_params, RequestOptions options)
    : req_id_(std::move(req_id)),
      sampling_params_(std::move(sampling_params)),
      options_(std::move(options)),
      all_token_ids_(std::move(prompt_token_ids)) {
  num_prompt_tokens_ = static_cast<int>(all_token_ids_.size());
}

}  // namespace kvasir
