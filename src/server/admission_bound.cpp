#include "server/admission_bound.h"

#include <string>

#include "common/check.h"

namespace kvasir::server {

AdmissionBound::AdmissionBound(int64_t max_num_waiting) : max_num_waiting_(max_num_waiting) {
  KVASIR_CHECK(max_num_waiting_ >= 1);
}

Status AdmissionBound::try_admit(int64_t num_sequences) {
  KVASIR_CHECK(num_sequences >= 1);
  const std::string bound = std::to_string(max_num_waiting_);
  if (num_sequences > max_num_waiting_) {
    return invalid_argument("This request asks for " + std::to_string(num_sequences) +
                            " sequences (prompts x n), more than the " + bound +
                            " that may wait for a first token (--max-num-queued-reqs); it can never be admitted.");
  }
  // Check and add in one compare-exchange: two requests that each fit alone cannot both pass.
  int64_t cur = num_waiting_.load();
  do {
    if (cur + num_sequences > max_num_waiting_) {
      return resource_exhausted("Too many requests are waiting (--max-num-queued-reqs " + bound + " sequences; " +
                                std::to_string(cur) + " waiting, this request adds " +
                                std::to_string(num_sequences) + "); retry later.");
    }
  } while (!num_waiting_.compare_exchange_weak(cur, cur + num_sequences));
  return Status();
}

void AdmissionBound::release(int64_t num_sequences) {
  const int64_t before = num_waiting_.fetch_sub(num_sequences);
  KVASIR_CHECK_MSG(before >= num_sequences, "released more sequences than were admitted");
}

}  // namespace kvasir::server
