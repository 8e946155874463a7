// Scheduler, second half: folding a step's results back (update_from_output), stats, invariants.
#include <algorithm>
#include <utility>

#include "common/check.h"
#include "sched/draft_budget.h"
#include "sched/scheduler.h"
#include "sched/stop_check.h"

namespace kvasir {
namespace {

LogprobsLists first_rows(const LogprobsLists& in, int num_rows) {
  if (num_rows >= in.num_rows) return in;
  LogprobsLists out;
  out.num_rows = num_rows;
  out.num_per_row = in.num_per_row;
  const auto n = static_cast<size_t>(num_rows) * static_cast<size_t>(in.num_per_row);
  out.token_ids.assign(in.token_ids.begin(), in.token_ids.begin() + static_cast<ptrdiff_t>(n));
  out.logprobs.assign(in.logprobs.begin(), in.logprobs.begin() + static_cast<ptrdiff_t>(n));
  out.ranks.assign(in.ranks.begin(), in.ranks.begin() + num_rows);
  return out;
}

}  // namespace

EngineCoreOutputs Scheduler::update_from_output(const SchedulerOutput& scheduler_output,
                                                const ModelRunnerOutput& runner_output) {
  EngineCoreOutputs result;
  result.outputs = std::move(pending_outputs_);
  pending_outputs_.clear();

  std::unordered_map<std::string_view, const RunnerRequestOutput*> by_id;
  by_id.reserve(runner_output.outputs.size());
  for (const RunnerRequestOutput& o : runner_output.outputs) by_id.emplace(o.req_id, &o);

  std::vector<Request*> finished;
  // computed_through: the tokens with KV once this step ran (with async scheduling, a later step
  // may already be scheduled past it).
  auto process = [&](const std::string& req_id, int computed_through) {
    Request* r = find(req_id);
    // Finished or aborted since schedule(): the runner's work for it is dropped.
    if (r == nullptr || r->finished()) return;
    // Async only: preempted by a schedule() after this step's; its sampled token still counts.
    const bool running = r->status() == RequestStatus::kRunning;
    KVASIR_CHECK(running || (config_.async_scheduling && r->status() == RequestStatus::kPreempted));
    const auto found = by_id.find(req_id);
    const RunnerRequestOutput* ro = found == by_id.end() ? nullptr : found->second;
    const auto spec = scheduler_output.scheduled_spec_decode_tokens.find(req_id);
    const int num_drafts =
        spec == scheduler_output.scheduled_spec_decode_tokens.end() ? 0 : static_cast<int>(spec->second.size());
    int num_accepted = 0;  // drafts kept: tokens whose KV is computed but not yet appended
    if (num_drafts > 0) {
      KVASIR_CHECK_MSG(ro != nullptr && !ro->sampled_token_ids.empty() &&
                           static_cast<int>(ro->sampled_token_ids.size()) <= num_drafts + 1,
                       "the runner returned no token, or more than the drafts plus one, for a verify step");
      // Rejected drafts' KV is stale: roll back so the next step overwrites those slots, and
      // never publish them (cache_blocks below sees only the accepted positions).
      num_accepted = static_cast<int>(ro->sampled_token_ids.size()) - 1;
      const int num_rejected = num_drafts - num_accepted;
      computed_through -= num_rejected;
      r->set_num_computed_tokens(r->num_computed_tokens() - num_rejected);
      r->set_spec_acceptance_rate(updated_acceptance_rate(r->spec_acceptance_rate(), num_drafts, num_accepted));
      ++spec_stats_.spec_num_drafts;
      spec_stats_.spec_num_draft_tokens += num_drafts;
      spec_stats_.spec_num_accepted_tokens += num_accepted;
      auto& per_pos = spec_stats_.spec_num_accepted_tokens_per_pos;
      if (static_cast<int>(per_pos.size()) < num_drafts) per_pos.resize(static_cast<size_t>(num_drafts), 0);
      for (int i = 0; i < num_accepted; ++i) ++per_pos[static_cast<size_t>(i)];
    }

    EngineCoreOutput out;
    bool emit = false;
    if (ro != nullptr && ro->prompt_logprobs) {
      out.new_prompt_logprobs = *ro->prompt_logprobs;
      emit = true;
    }
    KVASIR_CHECK(computed_through - num_accepted <= r->num_tokens());
    if (computed_through - num_accepted < r->num_tokens()) {
      KVASIR_CHECK_MSG(num_drafts == 0, "drafts were verified in a step that cannot sample");
      KVASIR_CHECK_MSG(ro == nullptr || ro->sampled_token_ids.empty(),
                       "the runner sampled a token for a prefill chunk short of the prompt's end");
    } else {
      KVASIR_CHECK_MSG(ro != nullptr && !ro->sampled_token_ids.empty(),
                       "the runner sampled nothing for a request that reached its last token");
      if (config_.async_scheduling) {
        KVASIR_CHECK_MSG(r->num_output_placeholders() > 0, "a sampled token had no placeholder");
        r->set_num_output_placeholders(r->num_output_placeholders() - 1);
      }
      int kept = 0;
      for (TokenId t : ro->sampled_token_ids) {
        r->append_output_token(t);
        ++kept;
        if (check_stop(*r, config_.max_model_len)) break;  // tokens after a stop are dropped
      }
      out.new_token_ids.assign(r->all_token_ids().end() - kept, r->all_token_ids().end());
      if (ro->logprobs) out.new_logprobs = first_rows(*ro->logprobs, kept);
      emit = true;
      if (running && !r->finished()) r->set_spec_token_ids(ro->spec_token_ids);
    }
    // The step has written these tokens' KV: full blocks among them become shareable. After the
    // append: accepted drafts are tokens of the request only now. A stop inside an accepted run
    // leaves fewer tokens than were computed; the request ends, and what it published is its own.
    if (running) kv_.cache_blocks(*r, std::min(computed_through, r->num_tokens()));
    if (r->finished()) {
      out.finish_reason = finish_reason_of(r->status());
      out.stop_token_id = r->stop_token_id();
      finished.push_back(r);
      if (!running) KVASIR_CHECK(waiting_.remove(r));
    }
    if (!emit) return;
    out.req_id = r->req_id();
    out.num_prompt_tokens = r->num_prompt_tokens();
    out.num_cached_tokens = std::max(0, r->num_cached_tokens());
    result.outputs.push_back(std::move(out));
  };
  auto num_scheduled = [&](const std::string& req_id) {
    const auto it = scheduler_output.num_scheduled_tokens.find(req_id);
    return it == scheduler_output.num_scheduled_tokens.end() ? 0 : it->second;
  };
  for (const NewRequestData& d : scheduler_output.scheduled_new_reqs) {
    process(d.req_id, d.num_computed_tokens + num_scheduled(d.req_id));
  }
  for (const CachedRequestData& d : scheduler_output.scheduled_cached_reqs) {
    process(d.req_id, d.num_computed_tokens + num_scheduled(d.req_id));
  }

  if (!finished.empty()) {
    std::erase_if(running_, [](const Request* r) { return r->finished(); });
    for (Request* r : finished) retire(r);
  }
  result.stats = make_stats();
  return result;
}

SchedulerStats Scheduler::make_stats() const {
  SchedulerStats s;
  s.num_running_reqs = num_running_reqs();
  s.num_waiting_reqs = num_waiting_reqs();
  s.num_preemptions = num_preemptions_;
  s.kv_cache_usage = kv_.usage();
  s.prefix_cache_queries = kv_.prefix_cache_stats().num_query_tokens;
  s.prefix_cache_hits = kv_.prefix_cache_stats().num_hit_tokens;
  s.spec_num_drafts = spec_stats_.spec_num_drafts;
  s.spec_num_draft_tokens = spec_stats_.spec_num_draft_tokens;
  s.spec_num_accepted_tokens = spec_stats_.spec_num_accepted_tokens;
  s.spec_num_accepted_tokens_per_pos = spec_stats_.spec_num_accepted_tokens_per_pos;
  return s;
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  KVASIR_CHECK_MSG(static_cast<int>(running_.size()) <= config_.max_num_seqs, "too many running");
  KVASIR_CHECK_MSG(running_.size() + waiting_.size() == requests_.size(),
                   "a request is neither running nor waiting (or both)");
  for (size_t i = 0; i < running_.size(); ++i) {
    const Request* r = running_[i];
    KVASIR_CHECK(r->status() == RequestStatus::kRunning);
    KVASIR_CHECK(find(r->req_id()) == r);
    // Between schedule() and its fold, drafts being verified are computed past the known tokens.
    KVASIR_CHECK(r->num_computed_tokens() <= num_tokens_with_placeholders(*r) + config_.num_speculative_tokens);
    KVASIR_CHECK(config_.async_scheduling || r->num_output_placeholders() == 0);
    KVASIR_CHECK_MSG(static_cast<int>(kv_.get_block_ids(*r).size()) >=
                         kv_.num_blocks_for(r->num_computed_tokens()),
                     "a running request's computed tokens lack blocks");
    if (i > 0) {
      KVASIR_CHECK_MSG(running_order_key(config_.policy, *running_[i - 1]) <
                           running_order_key(config_.policy, *r),
                       "running list out of order");
    }
  }
  for (const Request* r : waiting_.ordered()) {
    KVASIR_CHECK(r->status() == RequestStatus::kWaiting ||
                 r->status() == RequestStatus::kPreempted);
    KVASIR_CHECK(find(r->req_id()) == r);
    if (r->status() == RequestStatus::kPreempted) {
      KVASIR_CHECK_MSG(kv_.get_block_ids(*r).empty() && r->num_computed_tokens() == 0,
                       "a preempted request still holds KV");
    }
  }
}

}  // namespace kvasir
