#include "sched/stop_check.h"

#include <algorithm>

namespace kvasir {

bool check_stop(Request& request, int max_model_len) {
  const SamplingParams& sp = request.sampling_params();
  if (request.num_output_tokens() > 0 && request.num_output_tokens() >= sp.min_tokens) {
    const TokenId last = request.output_token_ids().back();
    // A token that is both the EOS and the length limit reports "stop": the model chose to end.
    if (!sp.ignore_eos && request.eos_token_id() == last) {
      request.set_status(RequestStatus::kFinishedStopped);
      return true;
    }
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), last) !=
        sp.stop_token_ids.end()) {
      request.set_status(RequestStatus::kFinishedStopped);
      request.set_stop_token_id(last);
      return true;
    }
  }
  if (request.num_output_tokens() >= request.max_tokens() ||
      request.num_tokens() >= max_model_len) {
    request.set_status(RequestStatus::kFinishedLength);
    return true;
  }
  return false;
}

}  // namespace kvasir
