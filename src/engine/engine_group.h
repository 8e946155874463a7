// EngineGroup: --data-parallel-size D engine replicas behind one front (vLLM's data parallelism).
// Each replica is a whole Engine (its own scheduler, KV cache, prefix cache and runner); the group
// sends each request, with all its n > 1 children, to one replica: the one whose prefix cache
// holds the longest prefix of its prompt, else the least loaded (engine/replica_choice.h), and
// remembers where it went for aborts. With one replica it is a pass-through. Thread-safe like
// Engine. Must not schedule, hold per-step state or look inside a replica's core beyond asking
// its prefix cache.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace kvasir {

class EngineGroup {
 public:
  // Every replica serves the same model with the same options (the router compares their prefix
  // caches block for block, so their block sizes must agree).
  explicit EngineGroup(std::vector<std::unique_ptr<Engine>> replicas);
  ~EngineGroup();

  // Engine::add_request on the chosen replica; a request id still live anywhere in the group is
  // refused as a duplicate.
  StatusOr<std::shared_ptr<RequestStream>> add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                                                       const SamplingParams& params, const AddRequestOptions& options = {});
  // Ends the request on the replica that has it (a no-op for an unknown or finished id).
  void abort(const std::string& request_id);

  size_t size() const { return replicas_.size(); }
  Engine& replica(size_t i) { return *replicas_[i]; }
  const Engine& replica(size_t i) const { return *replicas_[i]; }
  // Any replica failed: the group is dead (the server answers 503 and exits, as with one engine).
  bool dead() const;
  // Why the first failed replica failed, naming it when there are several; empty while none did.
  std::string fault() const;
  // The replicas' options and request rules are equal; these are replica 0's.
  const EngineOptions& options() const { return replicas_.front()->options(); }
  const RequestValidator& validator() const { return replicas_.front()->validator(); }
  int num_unfinished() const;
  // Which replica request_id went to, or -1 (unknown or finished and forgotten). For tests and logs.
  int replica_of(const std::string& request_id) const;
  // /metrics: totals, then per replica with engine="i" (engine/metrics.h).
  std::string render_prometheus(const std::string& model_name) const;

  void shutdown();

 private:
  // The prompt's hash chain as the prefix cache would look it up (cache salt included, the last
  // token left out since it is always computed); empty when no replica could hit.
  std::vector<BlockHash> lookup_chain(const std::vector<int32_t>& prompt, const SamplingParams& params,
                                      const AddRequestOptions& options) const;
  int choose(const std::vector<int32_t>& prompt, const SamplingParams& params, const AddRequestOptions& options);
  void prune_finished_locked();

  std::vector<std::unique_ptr<Engine>> replicas_;
  std::atomic<size_t> next_start_{0};  // round-robin start for ties
  std::atomic<bool> failing_{false};   // a replica's fault has been passed to the others
  mutable std::mutex mu_;
  struct Placement {
    int replica = 0;
    std::weak_ptr<RequestStream> stream;
  };
  std::unordered_map<std::string, Placement> placements_;  // request id -> where it runs
  size_t adds_since_prune_ = 0;
  std::string first_fault_;  // the replica fault that failed the group (guarded by mu_)
};

}  // namespace kvasir
