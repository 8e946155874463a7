#include "sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/log.h"
#include "sched/draft_budget.h"

namespace kvasir {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      kv_(config.num_blocks, config.block_size, config.max_model_len, config.enable_prefix_caching),
      waiting_(config.policy) {
  const Status s = config.validate();
  KVASIR_CHECK_MSG(s.ok(), s.message().c_str());
}

Status Scheduler::add_request(std::unique_ptr<Request> request) {
  KVASIR_CHECK(request != nullptr);
  const std::string& id = request->req_id();
  // An engine child id ("0_x" of request "x" with n = 2) can meet a caller's own "0_x".
  if (requests_.find(std::string_view(id)) != requests_.end()) {
    return invalid_argument("request id '" + id + "' is already in use");
  }
  // The engine's RequestValidator checked the request's rules (prompt, max_tokens, max_model_len)
  // before it got here: a request that breaks them now is a bug upstream, not bad input.
  const int prompt_len = request->num_prompt_tokens();
  KVASIR_CHECK_MSG(prompt_len > 0, "an empty prompt reached the scheduler");
  KVASIR_CHECK_MSG(request->num_output_tokens() == 0 && request->status() == RequestStatus::kWaiting,
                   "a request that is not fresh was added");
  for (TokenId t : request->prompt_token_ids()) KVASIR_CHECK_MSG(t >= 0, "a negative prompt token id");
  const int max_tokens = request->max_tokens();
  KVASIR_CHECK_MSG(max_tokens >= 1, "max_tokens < 1 reached the scheduler");
  KVASIR_CHECK_MSG(static_cast<int64_t>(prompt_len) + max_tokens <= config_.max_model_len,
                   "prompt + max_tokens past max_model_len reached the scheduler");
  // Not a request rule but this cache's size: the scheduler is the one that knows it.
  const int usable_blocks = config_.num_blocks - 1;
  if (kv_.num_blocks_for(prompt_len) > usable_blocks) {
    return out_of_range("prompt (" + std::to_string(prompt_len) +
                        " tokens) needs more KV blocks (" +
                        std::to_string(kv_.num_blocks_for(prompt_len)) + ") than the cache has (" +
                        std::to_string(usable_blocks) + ")");
  }
  request->set_idx(next_idx_++);
  Request* r = request.get();
  requests_.emplace(id, std::move(request));
  waiting_.push_back(r);
  return Status::ok_status();
}

Request* Scheduler::find(std::string_view req_id) const {
  const auto it = requests_.find(req_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const Request* Scheduler::get_request(std::string_view req_id) const { return find(req_id); }

bool Scheduler::finish_request(std::string_view req_id, RequestStatus status) {
  KVASIR_CHECK_MSG(is_finished(status), "finish_request needs a finished status");
  Request* r = find(req_id);
  if (r == nullptr) return false;
  if (r->status() == RequestStatus::kRunning) {
    remove_running(r);
  } else {
    KVASIR_CHECK(waiting_.remove(r));
  }
  r->set_status(status);
  retire(r);
  return true;
}

void Scheduler::insert_running(Request* request) {
  const RequestOrderKey key = running_order_key(config_.policy, *request);
  const auto pos = std::upper_bound(running_.begin(), running_.end(), key,
                                    [&](const RequestOrderKey& k, const Request* r) {
                                      return k < running_order_key(config_.policy, *r);
                                    });
  running_.insert(pos, request);
}

void Scheduler::remove_running(const Request* request) {
  const auto it = std::find(running_.begin(), running_.end(), request);
  KVASIR_CHECK(it != running_.end());
  running_.erase(it);
}

void Scheduler::retire(Request* request) {
  kv_.free(*request);
  if (request->ever_scheduled()) finished_since_last_.push_back(request->req_id());
  const auto it = requests_.find(std::string_view(request->req_id()));
  KVASIR_CHECK(it != requests_.end());
  requests_.erase(it);  // destroys `request`
}

void Scheduler::fail_request(Request* request, std::string message) {
  KVASIR_LOG_WARN("request %s failed: %s", request->req_id().c_str(), message.c_str());
  EngineCoreOutput out;
  out.req_id = request->req_id();
  out.finish_reason = FinishReason::kError;
  out.error_message = std::move(message);
  out.num_prompt_tokens = request->num_prompt_tokens();
  out.num_cached_tokens = std::max(0, request->num_cached_tokens());
  pending_outputs_.push_back(std::move(out));
  request->set_status(RequestStatus::kFinishedError);
  retire(request);
}

void Scheduler::preempt(Request* request, StepPlan& plan) {
  KVASIR_CHECK(!running_.empty() && running_.back() == request);
  running_.pop_back();
  kv_.free(*request);
  request->set_status(RequestStatus::kPreempted);
  request->set_spec_token_ids({});  // proposed for KV that is gone; the runner proposes anew
  // Recomputed from scratch on resume; the prefix cache usually still holds most of its blocks.
  request->set_num_computed_tokens(0);
  request->count_preemption();
  ++num_preemptions_;
  waiting_.push_front(request);
  plan.preempted.push_back(request);
}

bool Scheduler::fits_in_cache(int num_tokens) const {
  const int needed = std::min(num_tokens, config_.max_model_len);
  return kv_.num_blocks_for(needed) <= config_.num_blocks - 1;
}

std::string Scheduler::cannot_fit_message(int num_tokens) const {
  return "request needs " + std::to_string(num_tokens) +
         " tokens of KV cache; the whole cache holds " +
         std::to_string((config_.num_blocks - 1) * config_.block_size);
}

Scheduler::AllocResult Scheduler::allocate_or_preempt(Request* request, int num_new_tokens,
                                                      int& pending_decodes, StepPlan& plan,
                                                      std::vector<BlockId>& new_blocks) {
  const int num_tokens = request->num_computed_tokens() + num_new_tokens;
  if (!fits_in_cache(num_tokens)) {
    // Preempting others would not help: fail it before anyone loses work.
    remove_running(request);
    fail_request(request, cannot_fit_message(num_tokens));
    return AllocResult::kFailed;
  }
  while (true) {
    std::optional<std::vector<BlockId>> blocks = kv_.allocate_slots(*request, num_new_tokens);
    if (blocks) {
      new_blocks = std::move(*blocks);
      return AllocResult::kAllocated;
    }
    // The back of the running list has not been scheduled yet this step (or is `request`).
    Request* victim = running_.back();
    const bool victim_decodes = num_tokens_to_compute(*victim) == 1;
    if (victim != request && victim_decodes) --pending_decodes;
    preempt(victim, plan);
    if (victim == request) return AllocResult::kPreemptedSelf;
  }
}

int Scheduler::num_drafts_to_verify(Request& r, int budget, int num_decodes, int num_step_tokens) {
  const std::vector<TokenId>& drafts = r.spec_token_ids();
  // Drafts withheld by the last step (num_drafts_to_propose) count as drafts the budget skipped:
  // the estimate relaxes, so the request is tried again later.
  if (drafts.empty() && r.spec_drafts_withheld()) r.set_spec_acceptance_rate(relaxed_acceptance_rate(r.spec_acceptance_rate()));
  if (drafts.empty() || budget <= 0) return 0;
  // Drafts past max_tokens would be cut anyway; this also keeps positions below max_model_len.
  const int room = std::min(r.max_tokens() - r.num_output_tokens() - 1, config_.max_model_len - r.num_tokens());
  const int cap = std::min({static_cast<int>(drafts.size()), config_.num_speculative_tokens, budget, room});
  if (config_.spec_verify_all_drafts) return cap;
  int n = num_drafts_worth_verifying(step_costs_, cap, r.spec_acceptance_rate(), num_decodes, num_step_tokens);
  if (probe_this_step_ && num_decodes <= kProbeMaxDecodes && n < cap && !step_costs_.learned(num_step_tokens + n + 1)) {
    ++n;
    probe_this_step_ = false;
    return n;
  }
  if (n == 0 && cap > 0) r.set_spec_acceptance_rate(relaxed_acceptance_rate(r.spec_acceptance_rate()));
  return n;
}

bool Scheduler::drafts_worth_proposing(const Request& r, int num_decodes) const {
  if (config_.spec_verify_all_drafts) return true;
  // As if no other request drafted next step (the budget there sees at least these tokens), and
  // when the next step may probe: a probe verifies a draft the estimate alone would not.
  const bool next_step_probes = config_.num_speculative_tokens > 0 && steps_since_probe_ + 1 >= kProbeEvery;
  if (next_step_probes && num_decodes <= kProbeMaxDecodes && !step_costs_.learned(num_decodes + 1)) return true;
  return num_drafts_worth_verifying(step_costs_, config_.num_speculative_tokens, r.spec_acceptance_rate(), num_decodes,
                                    num_decodes, config_.spec_draft_cost_ratio) > 0;
}

bool Scheduler::allocate_with_drafts(Request& r, int num_drafts, std::vector<BlockId>& new_blocks) {
  if (!fits_in_cache(r.num_computed_tokens() + 1 + num_drafts)) return false;
  std::optional<std::vector<BlockId>> blocks = kv_.allocate_slots(r, 1 + num_drafts);
  if (!blocks) return false;
  new_blocks = std::move(*blocks);
  return true;
}

PartialPrefillLimits Scheduler::make_partial_prefill_limits() const {
  if (config_.max_num_partial_prefills <= 1) return PartialPrefillLimits(config_, 1);
  const int threshold = *config_.long_prefill_token_threshold;  // validate() made sure
  int num_prefills = 0, num_long = 0;
  for (const Request* r : running_) {
    const int remaining = num_tokens_to_compute(*r);
    if (remaining <= 1) continue;
    ++num_prefills;
    if (remaining > threshold) ++num_long;
  }
  if (num_prefills < config_.max_num_partial_prefills) {
    for (const Request* r : waiting_.ordered()) {
      if (num_prefills >= config_.max_num_partial_prefills) break;
      if (r->num_tokens() - r->num_computed_tokens() > threshold) {
        if (num_long >= config_.max_long_partial_prefills) continue;  // would not be let in
        ++num_long;
      }
      ++num_prefills;
    }
  }
  return PartialPrefillLimits(config_, num_prefills);
}

void Scheduler::schedule_running(StepPlan& plan, PartialPrefillLimits& limits) {
  auto is_decode = [](const Request* r) { return num_tokens_to_compute(*r) == 1; };
  // Decodes not yet visited: a prefill chunk leaves budget for them, so a long prompt never
  // stalls running decodes.
  int pending_decodes =
      static_cast<int>(std::count_if(running_.begin(), running_.end(), is_decode));
  const int num_decodes = pending_decodes;  // the batch size speculation adapts to
  size_t i = 0;
  while (i < running_.size() && plan.token_budget > 0) {
    Request* r = running_[i];
    const int remaining = num_tokens_to_compute(*r);
    const bool decode = remaining == 1;
    if (decode) --pending_decodes;
    int n = remaining;
    if (config_.long_prefill_token_threshold)
      n = std::min(n, *config_.long_prefill_token_threshold);
    if (!decode) n = std::min(n, limits.chunk_cap(remaining));
    n = std::min(n, plan.token_budget - (decode ? 0 : pending_decodes));
    // Async: wait for the tokens in flight when they end the request by length (one more step
    // would be thrown away) or when this step could never fit (failing it now would drop them).
    // A prefill past the partial-prefill limits waits for the next step.
    if (n <= 0 || certain_to_finish(*r) || (!decode && !limits.allows(remaining, n)) ||
        (r->num_output_placeholders() > 0 && !fits_in_cache(r->num_computed_tokens() + n))) {
      ++i;
      continue;
    }
    std::vector<BlockId> blocks;
    // Drafts take only budget that no later decode needs.
    int num_drafts = decode && n == 1 && config_.num_speculative_tokens > 0
                         ? num_drafts_to_verify(*r, plan.token_budget - 1 - pending_decodes, num_decodes,
                                                config_.max_num_batched_tokens - plan.token_budget + 1 + pending_decodes)
                         : 0;
    if (num_drafts > 0 && allocate_with_drafts(*r, num_drafts, blocks)) {
      n += num_drafts;
    } else {
      num_drafts = 0;
      const AllocResult res = allocate_or_preempt(r, n, pending_decodes, plan, blocks);
      if (res == AllocResult::kFailed) continue;      // r left the list; running_[i] is the next one
      if (res == AllocResult::kPreemptedSelf) break;  // r was the last one
    }
    if (!decode) limits.record(remaining, n);
    plan.running.push_back({r, std::move(blocks), num_drafts});
    plan.num_tokens.emplace_back(r, n);
    plan.token_budget -= n;
    ++i;
  }
}

void Scheduler::schedule_waiting(StepPlan& plan, PartialPrefillLimits& limits) {
  // Prompts the partial-prefill limits hold back this step: later, shorter ones may pass them
  // (vLLM lets short prompts jump long ones); they go back to their places afterwards.
  std::vector<Request*> held_back;
  while (!waiting_.empty() && plan.token_budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    // The engine folds a step's result before the next schedule() can resume what it preempted.
    KVASIR_CHECK_MSG(r->num_output_placeholders() == 0, "a waiting request has tokens in flight");
    KvCacheManager::ComputedBlocks hit;
    int num_computed = r->num_computed_tokens();  // non-zero only for a forked request
    if (num_computed == 0) {
      hit = kv_.get_computed_blocks(*r);
      num_computed = hit.num_computed_tokens;
    }
    const int remaining = r->num_tokens() - num_computed;
    int n = remaining;
    if (config_.long_prefill_token_threshold)
      n = std::min(n, *config_.long_prefill_token_threshold);
    n = std::min({n, limits.chunk_cap(remaining), plan.token_budget});
    KVASIR_CHECK(n > 0);
    if (!limits.allows(remaining, n)) {
      waiting_.pop_front();
      held_back.push_back(r);
      continue;
    }
    const bool fits = fits_in_cache(num_computed + n);
    const std::optional<std::vector<BlockId>> blocks =
        fits ? kv_.allocate_slots(*r, n, hit.num_computed_tokens, hit.blocks) : std::nullopt;
    if (!blocks) {
      // Unless it can never fit, wait for running requests to free blocks (keeps the order).
      // With nothing running, every block is free or evictable: waiting would never end.
      if (fits && !running_.empty()) break;
      waiting_.pop_front();
      fail_request(r, cannot_fit_message(num_computed + n));
      continue;
    }
    waiting_.pop_front();
    if (r->status() == RequestStatus::kPreempted) {
      plan.resumed_reqs.push_back(r);
    } else {
      plan.new_reqs.push_back(r);
    }
    r->set_status(RequestStatus::kRunning);
    r->set_num_computed_tokens(num_computed);
    if (r->num_cached_tokens() < 0) r->set_num_cached_tokens(num_computed);
    insert_running(r);
    limits.record(remaining, n);
    plan.num_tokens.emplace_back(r, n);
    plan.token_budget -= n;
  }
  for (auto it = held_back.rbegin(); it != held_back.rend(); ++it) waiting_.push_front(*it);
}

void Scheduler::observe_step_time(const SchedulerOutput& so, double seconds) {
  if (config_.num_speculative_tokens == 0 || so.total_num_scheduled_tokens == 0) return;
  for (const auto& [id, n] : so.num_scheduled_tokens) {
    auto d = so.scheduled_spec_decode_tokens.find(id);
    const int drafts = d == so.scheduled_spec_decode_tokens.end() ? 0 : static_cast<int>(d->second.size());
    if (n != 1 + drafts) return;  // a prefill chunk: not a point of the curve
  }
  step_costs_.observe(so.total_num_scheduled_tokens, seconds);
}

SchedulerOutput Scheduler::schedule() {
  if (config_.num_speculative_tokens > 0 && ++steps_since_probe_ >= kProbeEvery) {
    steps_since_probe_ = 0;
    probe_this_step_ = true;
  }
  StepPlan plan;
  plan.token_budget = config_.max_num_batched_tokens;
  PartialPrefillLimits limits = make_partial_prefill_limits();
  schedule_running(plan, limits);
  // As vLLM: no admissions in a step that had to preempt; the freed blocks go to those preempted.
  if (plan.preempted.empty()) schedule_waiting(plan, limits);
  probe_this_step_ = false;
  return encode(plan);
}

SchedulerOutput Scheduler::encode(StepPlan& plan) {
  SchedulerOutput out;
  for (Request* r : plan.new_reqs) {
    NewRequestData d;
    d.req_id = r->req_id();
    d.prompt_token_ids.assign(r->prompt_token_ids().begin(), r->prompt_token_ids().end());
    d.sampling_params = r->sampling_params();
    d.eos_token_id = r->eos_token_id();
    d.adapter_id = r->adapter_id();
    const auto table = kv_.get_block_ids(*r);
    d.block_ids.assign(table.begin(), table.end());
    d.num_computed_tokens = r->num_computed_tokens();
    out.scheduled_new_reqs.push_back(std::move(d));
  }
  for (ScheduledRunning& s : plan.running) {
    CachedRequestData d;
    d.req_id = s.request->req_id();
    d.new_block_ids = std::move(s.new_block_ids);
    d.num_computed_tokens = s.request->num_computed_tokens();
    out.scheduled_cached_reqs.push_back(std::move(d));
    if (s.num_drafts > 0) {
      const std::vector<TokenId>& drafts = s.request->spec_token_ids();
      out.scheduled_spec_decode_tokens[s.request->req_id()].assign(drafts.begin(), drafts.begin() + s.num_drafts);
    }
    // Verified now or never: the runner proposes afresh after this step.
    s.request->set_spec_token_ids({});
  }
  for (Request* r : plan.resumed_reqs) {
    CachedRequestData d;
    d.req_id = r->req_id();
    d.resumed_from_preemption = true;
    d.resumed_token_ids.assign(r->all_token_ids().begin(), r->all_token_ids().end());
    const auto table = kv_.get_block_ids(*r);
    d.new_block_ids.assign(table.begin(), table.end());
    d.num_computed_tokens = r->num_computed_tokens();
    out.scheduled_cached_reqs.push_back(std::move(d));
  }
  int num_sampling = 0;  // this step's batch size, as the next step's draft budget will see it
  for (const auto& [req, n] : plan.num_tokens) num_sampling += req->num_computed_tokens() + n >= num_tokens_with_placeholders(*req);
  for (const auto& [req, n] : plan.num_tokens) {
    out.num_scheduled_tokens[req->req_id()] = n;
    out.total_num_scheduled_tokens += n;
    // The KV of these tokens is in flight: the next schedule() treats them as computed.
    req->set_num_computed_tokens(req->num_computed_tokens() + n);
    req->mark_scheduled();
    // Samples when its computed tokens reach every known (or in-flight) token (drafts beyond).
    const bool samples = req->num_computed_tokens() >= num_tokens_with_placeholders(*req);
    if (samples && req->grammar()) out.structured_output_req_ids.push_back(req->req_id());
    if (samples && config_.num_speculative_tokens > 0) {
      const bool withhold = !drafts_worth_proposing(*req, num_sampling);
      req->set_spec_drafts_withheld(withhold);
      if (withhold) out.num_drafts_to_propose[req->req_id()] = 0;
    }
    // Async: this step samples a token nobody knows yet; the next schedule() may already compute it.
    if (config_.async_scheduling && samples) {
      req->set_num_output_placeholders(req->num_output_placeholders() + 1);
    }
  }
  for (Request* r : plan.preempted) out.preempted_req_ids.push_back(r->req_id());
  out.finished_req_ids = std::move(finished_since_last_);
  finished_since_last_.clear();
  return out;
}

}  // namespace kvasir
