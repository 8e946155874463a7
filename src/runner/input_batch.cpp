#include "runner/input_batch.h"

#include <algorithm>

namespace kvasir {

const CachedRequestState* InputBatch::find(const std::string& req_id) const {
  const auto it = requests_.find(req_id);
  return it == requests_.end() ? nullptr : &it->second;
}

CachedRequestState* InputBatch::find(const std::string& req_id) {
  const auto it = requests_.find(req_id);
  return it == requests_.end() ? nullptr : &it->second;
}

Status InputBatch::apply_new(const NewRequestData& d) {
  if (requests_.count(d.req_id) != 0) return internal_error("new request " + d.req_id + " is already held");
  CachedRequestState r;
  r.tokens.assign(d.prompt_token_ids.begin(), d.prompt_token_ids.end());
  r.num_prompt_tokens = static_cast<int32_t>(d.prompt_token_ids.size());
  r.params = d.sampling_params;
  r.block_ids.assign(d.block_ids.begin(), d.block_ids.end());
  r.num_computed_tokens = d.num_computed_tokens;
  r.arrival_index = next_arrival_index_++;
  requests_.emplace(d.req_id, std::move(r));
  return Status();
}

Status InputBatch::apply_cached(const CachedRequestData& d) {
  const auto it = requests_.find(d.req_id);
  if (it == requests_.end()) return internal_error("cached request " + d.req_id + " is not held");
  CachedRequestState& r = it->second;
  if (d.resumed_from_preemption) {
    if (!r.preempted) return internal_error("resumed request " + d.req_id + " was not preempted");
    // The scheduler's tokens must extend ours: the runner sampled every output token it holds.
    if (d.resumed_token_ids.size() < r.tokens.size() ||
        !std::equal(r.tokens.begin(), r.tokens.end(), d.resumed_token_ids.begin())) {
      return internal_error("resumed request " + d.req_id + " disagrees with the runner's tokens");
    }
    r.tokens.assign(d.resumed_token_ids.begin(), d.resumed_token_ids.end());
    r.block_ids.assign(d.new_block_ids.begin(), d.new_block_ids.end());  // the whole table
    r.num_computed_tokens = d.num_computed_tokens;
    r.preempted = false;
    return Status();
  }
  if (r.preempted) return internal_error("preempted request " + d.req_id + " scheduled without resuming");
  if (r.num_computed_tokens != d.num_computed_tokens) {
    return internal_error("request " + d.req_id + ": the scheduler counts " + std::to_string(d.num_computed_tokens) +
                          " computed tokens, the runner " + std::to_string(r.num_computed_tokens));
  }
  r.block_ids.insert(r.block_ids.end(), d.new_block_ids.begin(), d.new_block_ids.end());
  return Status();
}

void InputBatch::finish_verify(CachedRequestState& state, int num_drafts, std::span<const TokenId> emitted) {
  const auto accepted = static_cast<int32_t>(emitted.size()) - 1;
  state.tokens.resize(state.tokens.size() - static_cast<size_t>(num_drafts));
  state.tokens.insert(state.tokens.end(), emitted.begin(), emitted.end());
  state.num_computed_tokens -= num_drafts - accepted;
}

Status InputBatch::schedule(const std::string& req_id, int32_t n, const std::vector<TokenId>* drafts,
                            std::vector<ScheduledRequest>* scheduled) {
  CachedRequestState& r = requests_.at(req_id);
  const int32_t start = r.num_computed_tokens;
  const auto num_drafts = static_cast<int32_t>(drafts ? drafts->size() : 0);
  if (num_drafts > 0) {
    // Drafts follow the last known token, whose KV this step computes too.
    if (start + n != static_cast<int32_t>(r.tokens.size()) + num_drafts || n != num_drafts + 1) {
      return internal_error("request " + req_id + ": drafts scheduled other than after its last token");
    }
    r.tokens.insert(r.tokens.end(), drafts->begin(), drafts->end());
  }
  const auto num_known = static_cast<int32_t>(r.tokens.size());
  // With async scheduling the step may compute a token sampled by the step before; the runner
  // executes steps in order, so it has appended that token (or its placeholder) by now.
  if (n <= 0 || start + n > num_known) return internal_error("request " + req_id + " is scheduled past its known tokens");
  if ((start + n + block_size_ - 1) / block_size_ > static_cast<int32_t>(r.block_ids.size())) {
    return internal_error("block table too short for " + req_id);
  }
  scheduled->push_back(ScheduledRequest{&req_id, &r, start, n, start + n == num_known, num_drafts});
  r.num_computed_tokens = start + n;
  return Status();
}

Status InputBatch::apply(const SchedulerOutput& so, std::vector<ScheduledRequest>* scheduled) {
  scheduled->clear();
  for (const auto& id : so.finished_req_ids) requests_.erase(id);  // ids never seen are ignored
  for (const auto& id : so.preempted_req_ids) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) return internal_error("preempted request " + id + " is not held");
    // Keep tokens, params and arrival index: a resumed request recomputes from them into new blocks.
    it->second.block_ids.clear();
    it->second.num_computed_tokens = 0;
    it->second.preempted = true;
  }
  for (const auto& d : so.scheduled_new_reqs) KVASIR_RETURN_IF_ERROR(apply_new(d));
  for (const auto& d : so.scheduled_cached_reqs) KVASIR_RETURN_IF_ERROR(apply_cached(d));

  int64_t total = 0;
  auto visit = [&](const std::string& id) -> Status {
    const auto n = so.num_scheduled_tokens.find(id);
    if (n == so.num_scheduled_tokens.end()) return Status();  // carried, but computes nothing
    total += n->second;
    const auto d = so.scheduled_spec_decode_tokens.find(id);
    return schedule(id, n->second, d == so.scheduled_spec_decode_tokens.end() ? nullptr : &d->second, scheduled);
  };
  for (const auto& d : so.scheduled_new_reqs) KVASIR_RETURN_IF_ERROR(visit(d.req_id));
  for (const auto& d : so.scheduled_cached_reqs) KVASIR_RETURN_IF_ERROR(visit(d.req_id));
  // Every scheduled id must be one the output carried (else its tokens would be lost silently).
  if (total != so.total_num_scheduled_tokens) {
    return internal_error("scheduled token counts do not add up to total_num_scheduled_tokens");
  }
  return Status();
}

}  // namespace kvasir
