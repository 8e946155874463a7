// Test helpers for the scheduler: a fake model runner that follows the SchedulerOutput protocol
// the way a real runner must (its own per-request state, block tables, a simulated KV store it
// writes and reads), and a harness that steps scheduler + runner and checks both every step.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace kvasir::testing {

// Default sampler: a deterministic function of the request and its tokens so far, so a request's
// output does not depend on how it was scheduled (preemptions, chunking, cache hits).
inline TokenId default_sample(const std::string& req_id, const std::vector<TokenId>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (char c : req_id) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  h = (h ^ tokens.size()) * 1099511628211ull;
  h = (h ^ static_cast<uint32_t>(tokens.back())) * 1099511628211ull;
  return static_cast<TokenId>(10 + (h >> 33) % 50);
}

class FakeRunner {
 public:
  FakeRunner(int num_blocks, int block_size)
      : block_size_(block_size), kv_(static_cast<size_t>(num_blocks * block_size), -1) {}

  std::function<TokenId(const std::string&, const std::vector<TokenId>&)> sample = default_sample;

  ModelRunnerOutput execute(const SchedulerOutput& so) {
    for (const auto& id : so.finished_req_ids) states_.erase(id);
    for (const auto& id : so.preempted_req_ids) {
      EXPECT_TRUE(states_.count(id)) << "preempted a request the runner does not hold: " << id;
      states_.erase(id);
    }
    for (const NewRequestData& d : so.scheduled_new_reqs) {
      EXPECT_FALSE(states_.count(d.req_id)) << "new request already known: " << d.req_id;
      states_[d.req_id] = {d.prompt_token_ids, d.block_ids, d.num_computed_tokens};
    }
    for (const CachedRequestData& d : so.scheduled_cached_reqs) {
      if (d.resumed_from_preemption) {
        EXPECT_FALSE(states_.count(d.req_id)) << "resumed request still held: " << d.req_id;
        states_[d.req_id] = {d.resumed_token_ids, d.new_block_ids, d.num_computed_tokens};
        continue;
      }
      auto it = states_.find(d.req_id);
      EXPECT_NE(it, states_.end()) << "cached request unknown: " << d.req_id;
      if (it == states_.end()) continue;
      EXPECT_EQ(it->second.num_computed, d.num_computed_tokens) << d.req_id;
      it->second.blocks.insert(it->second.blocks.end(), d.new_block_ids.begin(),
                               d.new_block_ids.end());
    }
    ModelRunnerOutput out;
    int total = 0;
    for (const auto& [id, n] : so.num_scheduled_tokens) {
      total += n;
      State& st = states_.at(id);
      EXPECT_GT(n, 0);
      EXPECT_LE(st.num_computed + n, static_cast<int>(st.tokens.size())) << id;
      EXPECT_GE(static_cast<int>(st.blocks.size()) * block_size_, st.num_computed + n) << id;
      std::set<BlockId> uniq(st.blocks.begin(), st.blocks.end());
      EXPECT_EQ(uniq.size(), st.blocks.size()) << "block listed twice in " << id;
      EXPECT_FALSE(uniq.count(kNullBlockId)) << "null block handed to " << id;
      // Write this step's KV, then "attend" over the whole prefix: every slot must hold our token.
      for (int p = st.num_computed; p < st.num_computed + n; ++p) slot(st, p) = st.tokens[p];
      for (int p = 0; p < st.num_computed + n; ++p) {
        if (slot(st, p) != st.tokens[p]) {
          ADD_FAILURE() << id << " reads wrong KV at position " << p;
          break;
        }
      }
      st.num_computed += n;
      RunnerRequestOutput ro;
      ro.req_id = id;
      if (st.num_computed == static_cast<int>(st.tokens.size())) {
        const TokenId t = sample(id, st.tokens);
        st.tokens.push_back(t);
        ro.sampled_token_ids.push_back(t);
      }
      out.outputs.push_back(std::move(ro));
    }
    EXPECT_EQ(total, so.total_num_scheduled_tokens);
    return out;
  }

  const std::vector<BlockId>* table(const std::string& id) const {
    auto it = states_.find(id);
    return it == states_.end() ? nullptr : &it->second.blocks;
  }
  size_t num_held() const { return states_.size(); }

 private:
  struct State {
    std::vector<TokenId> tokens;
    std::vector<BlockId> blocks;
    int num_computed = 0;
  };
  TokenId& slot(const State& st, int pos) {
    const BlockId b = st.blocks[static_cast<size_t>(pos / block_size_)];
    return kv_[static_cast<size_t>(b * block_size_ + pos % block_size_)];
  }

  int block_size_;
  std::vector<TokenId> kv_;  // [num_blocks * block_size] token whose KV a slot holds
  std::map<std::string, State> states_;
};

struct Harness {
  explicit Harness(const SchedulerConfig& c)
      : config(c), sched(c), runner(c.num_blocks, c.block_size) {}

  Status add(const std::string& id, std::vector<TokenId> prompt, int max_tokens,
             RequestOptions opt = {}, SamplingParams sp = {}) {
    sp.max_tokens = max_tokens;
    return sched.add_request(std::make_unique<Request>(id, std::move(prompt), sp, std::move(opt)));
  }

  // One engine step; checks invariants and that runner and scheduler agree on block tables.
  SchedulerOutput step() {
    SchedulerOutput so = sched.schedule();
    sched.check_invariants();
    const ModelRunnerOutput ro = runner.execute(so);
    EngineCoreOutputs outs = sched.update_from_output(so, ro);
    sched.check_invariants();
    for (EngineCoreOutput& o : outs.outputs) {
      auto& toks = outputs[o.req_id];
      toks.insert(toks.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) {
        EXPECT_FALSE(finals.count(o.req_id)) << "finished twice: " << o.req_id;
        finals[o.req_id] = o;
      }
    }
    for (const Request* r : sched.running()) {
      const std::vector<BlockId>* t = runner.table(r->req_id());
      const auto kv = sched.kv_cache_manager().get_block_ids(*r);
      EXPECT_TRUE(t != nullptr && std::equal(kv.begin(), kv.end(), t->begin(), t->end()))
          << "runner and scheduler disagree on " << r->req_id() << "'s block table";
    }
    last_stats = outs.stats;
    ++num_steps;
    return so;
  }

  // Steps until nothing is left; fails the test past max_steps (a livelock).
  void run_to_completion(int max_steps = 10000) {
    while (sched.has_unfinished_requests()) {
      ASSERT_LT(num_steps, max_steps) << "scheduler does not make progress";
      step();
    }
    step();  // lets the runner see the last finished ids
    EXPECT_EQ(runner.num_held(), 0u);
    EXPECT_EQ(sched.kv_cache_manager().get_num_free_blocks(), config.num_blocks - 1) << "leak";
  }

  SchedulerConfig config;
  Scheduler sched;
  FakeRunner runner;
  std::map<std::string, std::vector<TokenId>> outputs;
  std::map<std::string, EngineCoreOutput> finals;
  SchedulerStats last_stats;
  int num_steps = 0;
};

inline std::vector<TokenId> tokens(int n, int start = 100) {
  std::vector<TokenId> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

inline SchedulerConfig small_config(int num_blocks = 64) {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 32;
  c.max_model_len = 512;
  c.block_size = 4;
  c.num_blocks = num_blocks;
  return c;
}

}  // namespace kvasir::testing
