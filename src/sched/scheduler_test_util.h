// Test helpers for the scheduler: a fake model runner that follows the SchedulerOutput protocol
// the way a real runner must (its own per-request state, block tables, a simulated KV store it
// writes and reads), and a harness that steps scheduler + runner and checks both every step.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include "runner/input_batch.h"
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

// The diff protocol itself (new, cached, finished, preempted, resumed) is runner/input_batch, the
// same code the real ModelRunner runs; this adds the simulated KV store and the sampler.
class FakeRunner {
 public:
  FakeRunner(int num_blocks, int block_size)
      : block_size_(block_size), batch_(block_size), kv_(static_cast<size_t>(num_blocks * block_size), -1) {}

  std::function<TokenId(const std::string&, const std::vector<TokenId>&)> sample = default_sample;
  // Speculative decoding: drafts proposed after each sampled step (null: none). Verification
  // samples at every draft position and keeps drafts equal to the samples, as the real runner.
  std::function<std::vector<TokenId>(const std::string&, const std::vector<TokenId>&)> propose;
  // Drafts no more than SchedulerOutput::num_drafts_to_propose says, as a model-running proposer
  // does; counts the proposals made.
  bool honor_proposal_caps = false;
  int num_proposals = 0;

  ModelRunnerOutput execute(const SchedulerOutput& so) {
    ModelRunnerOutput out;
    const Status applied = batch_.apply(so, &scheduled_);
    EXPECT_TRUE(applied.ok()) << applied.message();
    if (!applied.ok()) return out;
    for (const ScheduledRequest& s : scheduled_) {
      const std::string& id = *s.req_id;
      CachedRequestState& st = *s.state;
      std::set<BlockId> uniq(st.block_ids.begin(), st.block_ids.end());
      EXPECT_EQ(uniq.size(), st.block_ids.size()) << "block listed twice in " << id;
      EXPECT_FALSE(uniq.count(kNullBlockId)) << "null block handed to " << id;
      // Write this step's KV, then "attend" over the whole prefix: every slot must hold our token.
      const int end = s.start + s.num_tokens;
      for (int p = s.start; p < end; ++p) slot(st, p) = st.tokens[static_cast<size_t>(p)];
      for (int p = 0; p < end; ++p) {
        if (slot(st, p) != st.tokens[static_cast<size_t>(p)]) {
          ADD_FAILURE() << id << " reads wrong KV at position " << p;
          break;
        }
      }
      RunnerRequestOutput ro;
      ro.req_id = id;
      if (s.samples && s.num_drafts > 0) {
        const size_t known = st.tokens.size() - static_cast<size_t>(s.num_drafts);
        std::vector<TokenId> emitted;
        for (size_t j = 0; j <= static_cast<size_t>(s.num_drafts); ++j) {
          const TokenId t = sample(id, std::vector<TokenId>(st.tokens.begin(), st.tokens.begin() + static_cast<ptrdiff_t>(known + j)));
          emitted.push_back(t);
          if (j == static_cast<size_t>(s.num_drafts) || t != st.tokens[known + j]) break;
        }
        InputBatch::finish_verify(st, s.num_drafts, emitted);
        ro.sampled_token_ids = emitted;
      } else if (s.samples) {
        const TokenId t = sample(id, st.tokens);
        InputBatch::append_sampled(st, t);
        ro.sampled_token_ids.push_back(t);
      }
      if (s.samples && propose) {
        const auto cap = so.num_drafts_to_propose.find(id);
        if (honor_proposal_caps && cap != so.num_drafts_to_propose.end() && cap->second == 0) {
          ro.spec_token_ids.clear();
        } else {
          ro.spec_token_ids = propose(id, st.tokens);
          ++num_proposals;
        }
      }
      out.outputs.push_back(std::move(ro));
    }
    return out;
  }

  // The block table of a request the runner holds unpreempted, else nullptr.
  const std::vector<BlockId>* table(const std::string& id) const {
    const CachedRequestState* st = batch_.find(id);
    return st == nullptr || st->preempted ? nullptr : &st->block_ids;
  }
  size_t num_held() const { return batch_.size(); }

 private:
  TokenId& slot(const CachedRequestState& st, int pos) {
    const BlockId b = st.block_ids[static_cast<size_t>(pos / block_size_)];
    return kv_[static_cast<size_t>(b * block_size_ + pos % block_size_)];
  }

  int block_size_;
  InputBatch batch_;
  std::vector<ScheduledRequest> scheduled_;
  std::vector<TokenId> kv_;  // [num_blocks * block_size] token whose KV a slot holds
};

struct Harness {
  explicit Harness(const SchedulerConfig& c)
      : config(c), sched(c), runner(c.num_blocks, c.block_size) {}

  Status add(const std::string& id, std::vector<TokenId> prompt, int max_tokens,
             RequestOptions opt = {}, SamplingParams sp = {}) {
    sp.max_tokens = max_tokens;
    return sched.add_request(std::make_unique<Request>(id, std::move(prompt), sp, std::move(opt)));
  }

  // One engine step; checks invariants and that runner and scheduler agree on block tables. With
  // config.async_scheduling it schedules and runs this step, then folds the previous one back
  // (the order the engine loop uses), so the scheduler always has one step in flight.
  SchedulerOutput step() {
    SchedulerOutput so = sched.schedule();
    sched.check_invariants();
    ModelRunnerOutput ro = runner.execute(so);
    if (!config.async_scheduling) {
      fold(so, ro);
    } else {
      if (in_flight) fold(in_flight->first, in_flight->second);
      in_flight.emplace(so, std::move(ro));
    }
    for (const Request* r : sched.running()) {
      const std::vector<BlockId>* t = runner.table(r->req_id());
      const auto kv = sched.kv_cache_manager().get_block_ids(*r);
      EXPECT_TRUE(t != nullptr && std::equal(kv.begin(), kv.end(), t->begin(), t->end()))
          << "runner and scheduler disagree on " << r->req_id() << "'s block table";
    }
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
    if (in_flight) {
      fold(in_flight->first, in_flight->second);
      in_flight.reset();
      step();
      fold(in_flight->first, in_flight->second);
      in_flight.reset();
    }
    EXPECT_EQ(runner.num_held(), 0u);
    EXPECT_EQ(sched.kv_cache_manager().get_num_free_blocks(), config.num_blocks - 1) << "leak";
  }

  void fold(const SchedulerOutput& so, const ModelRunnerOutput& ro) {
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
    last_stats = outs.stats;
  }

  SchedulerConfig config;
  Scheduler sched;
  FakeRunner runner;
  std::map<std::string, std::vector<TokenId>> outputs;
  std::map<std::string, EngineCoreOutput> finals;
  SchedulerStats last_stats;
  int num_steps = 0;
  std::optional<std::pair<SchedulerOutput, ModelRunnerOutput>> in_flight;  // async only
};

// Tokens step `so` schedules for request `id` (0 when none).
inline int scheduled(const SchedulerOutput& so, const std::string& id) {
  const auto it = so.num_scheduled_tokens.find(id);
  return it == so.num_scheduled_tokens.end() ? 0 : it->second;
}

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
