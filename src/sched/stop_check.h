// Stop conditions the scheduler owns, checked after each appended token: max_tokens, max_model_len,
// EOS (unless ignore_eos) and stop_token_ids, none of the token ones before min_tokens. Stop
// strings are not here: the output processor finds them in text and finishes the request.
#pragma once

#include "core/request.h"

namespace kvasir {

// Sets the finished status (and stop_token_id) and returns true when the request must stop now.
bool check_stop(Request& request, int max_model_len);

}  // namespace kvasir
