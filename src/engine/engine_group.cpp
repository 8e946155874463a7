#include "engine/engine_group.h"

#include "common/check.h"
#include "engine/replica_choice.h"
#include "kv/block_hash.h"

namespace kvasir {

EngineGroup::EngineGroup(std::vector<std::unique_ptr<Engine>> replicas) : replicas_(std::move(replicas)) {
  KVASIR_CHECK_MSG(!replicas_.empty(), "an engine group needs a replica");
  for (const auto& r : replicas_) {
    KVASIR_CHECK_MSG(r->options().scheduler.block_size == replicas_.front()->options().scheduler.block_size,
                     "data-parallel replicas must share a block size");
  }
  if (replicas_.size() == 1) return;
  // One replica failing fails the group, as vLLM's DP front treats a dead engine core: the other
  // replicas end their requests with the same error, and the server answers 503.
  for (size_t i = 0; i < replicas_.size(); ++i) {
    replicas_[i]->set_on_fault([this, i](const std::string& why) {
      if (failing_.exchange(true)) return;  // the first failure speaks for the group
      const std::string msg = "data-parallel replica " + std::to_string(i) + " failed: " + why;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first_fault_ = msg;
      }
      for (size_t j = 0; j < replicas_.size(); ++j) {
        if (j != i) replicas_[j]->fail(msg);
      }
    });
  }
}

EngineGroup::~EngineGroup() { shutdown(); }

void EngineGroup::shutdown() {
  failing_ = true;  // a replica stopping is no fault to pass on
  for (auto& r : replicas_) r->shutdown();
}

bool EngineGroup::dead() const {
  for (const auto& r : replicas_) {
    if (r->dead()) return true;
  }
  return false;
}

std::string EngineGroup::fault() const {
  if (replicas_.size() > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_fault_.empty()) return first_fault_;
  }
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (!replicas_[i]->dead()) continue;
    std::string why = replicas_[i]->fault();
    if (why.empty()) why = "the engine failed";
    return replicas_.size() == 1 ? why : "data-parallel replica " + std::to_string(i) + " failed: " + why;
  }
  return "";
}

int EngineGroup::num_unfinished() const {
  int n = 0;
  for (const auto& r : replicas_) n += r->num_unfinished();
  return n;
}

std::string EngineGroup::render_prometheus(const std::string& model_name) const {
  std::vector<const EngineMetrics*> m;
  for (const auto& r : replicas_) m.push_back(&r->metrics());
  return render_prometheus_replicas(model_name, m);
}

std::vector<BlockHash> EngineGroup::lookup_chain(const std::vector<int32_t>& prompt, const SamplingParams& params,
                                                 const AddRequestOptions& options) const {
  const SchedulerConfig& sc = replicas_.front()->options().scheduler;
  std::vector<BlockHash> chain;
  // The KV manager's own limits: no lookup with caching off or prompt logprobs asked, and never
  // the last prompt token (its logits are needed), so only blocks wholly before it count.
  if (!sc.enable_prefix_caching || params.prompt_logprobs.has_value() || prompt.size() < 2) return chain;
  BlockHashExtraKeys extra;
  if (options.cache_salt) extra.cache_salt = std::string_view(*options.cache_salt);
  append_block_hashes(chain, std::span<const int32_t>(prompt.data(), prompt.size() - 1), sc.block_size, extra);
  return chain;
}

int EngineGroup::choose(const std::vector<int32_t>& prompt, const SamplingParams& params, const AddRequestOptions& options) {
  const size_t start = next_start_.fetch_add(1);
  std::vector<BlockHash> chain = lookup_chain(prompt, params, options);
  std::vector<ReplicaState> states(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Engine& e = *replicas_[i];
    states[i].dead = e.dead();
    states[i].num_unfinished = e.num_unfinished();
    states[i].cached_prefix_blocks = chain.empty() ? 0 : e.cached_prefix_blocks(chain);
  }
  return choose_replica(states, start);
}

void EngineGroup::prune_finished_locked() {
  adds_since_prune_ = 0;
  for (auto it = placements_.begin(); it != placements_.end();) {
    auto s = it->second.stream.lock();
    if (!s || s->all_finished()) it = placements_.erase(it);
    else ++it;
  }
}

StatusOr<std::shared_ptr<RequestStream>> EngineGroup::add_request(const std::string& request_id,
                                                                  std::vector<int32_t> prompt_token_ids,
                                                                  const SamplingParams& params,
                                                                  const AddRequestOptions& options) {
  if (replicas_.size() == 1) return replicas_.front()->add_request(request_id, std::move(prompt_token_ids), params, options);
  // A dead replica kills the group (as vLLM's DP front does): no new work while it is down.
  if (dead()) return unavailable("engine is not running: " + fault());
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = placements_.find(request_id);
    if (it != placements_.end()) {
      auto old = it->second.stream.lock();
      if (old && !old->all_finished()) return invalid_argument("duplicate request id " + request_id);
    }
  }
  const int r = choose(prompt_token_ids, params, options);
  if (r < 0) return unavailable("engine is not running: " + fault());
  KVASIR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream,
                          replicas_[static_cast<size_t>(r)]->add_request(request_id, std::move(prompt_token_ids), params, options));
  std::lock_guard<std::mutex> lock(mu_);
  if (++adds_since_prune_ >= 64) prune_finished_locked();
  placements_[request_id] = Placement{r, stream};
  return stream;
}

void EngineGroup::abort(const std::string& request_id) {
  if (replicas_.size() == 1) return replicas_.front()->abort(request_id);
  int r = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = placements_.find(request_id);
    if (it == placements_.end()) return;
    r = it->second.replica;
    placements_.erase(it);
  }
  replicas_[static_cast<size_t>(r)]->abort(request_id);
}

int EngineGroup::replica_of(const std::string& request_id) const {
  if (replicas_.size() == 1) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = placements_.find(request_id);
  return it == placements_.end() ? -1 : it->second.replica;
}

}  // namespace kvasir
