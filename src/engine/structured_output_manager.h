// StructuredOutputManager: the engine side of grammar-constrained decoding (vLLM's
// StructuredOutputManager). Holds one GrammarMatcher per constrained request and fills each
// step's GrammarBitmask on its own worker thread (and helpers), so the masks are computed while
// the step's forward pass runs and never block the loop. The tokens a step folds back are only
// queued on the engine thread; the fill of the request's next row advances its matcher with
// them first (an accept costs up to tens of microseconds on a long schema: 64 of them on the
// engine thread were 1.3 ms of device idle per step of a synchronous loop, measured on an H200).
// A request's matcher and queue are touched by one thread at a time: the engine thread appends
// while no fill of that request can run (a fill waits for the fold before it, the fold for the
// step's result, which waits for the fill). Must not touch tensors or the scheduler's state.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/blocking_queue.h"
#include "core/request.h"
#include "sched/grammar_bitmask.h"
#include "sched/scheduler_output.h"

namespace kvasir {
namespace structured {
class GrammarMatcher;
}

class StructuredOutputManager {
 public:
  // vocab_size: the logits row width the masks cover.
  explicit StructuredOutputManager(int32_t vocab_size);
  ~StructuredOutputManager();
  StructuredOutputManager(const StructuredOutputManager&) = delete;
  StructuredOutputManager& operator=(const StructuredOutputManager&) = delete;

  // A request entering the core: gets a matcher when it carries a grammar.
  void add_request(const Request& request);
  void remove_request(const std::string& req_id);
  bool empty() const { return entries_.empty(); }

  // Queues a step's new tokens for the matchers (the next fill accepts them); finished requests
  // drop theirs.
  void accept_outputs(const EngineCoreOutputs& outs);

  // Fills the rows of so.structured_output_req_ids on the worker, once `ready` is satisfied (the
  // fold of the step before, under async scheduling; invalid = now), each after accepting its
  // queued tokens. Rows of requests whose grammar has not started yet (still reasoning) are left
  // out. A request verifying drafts gets a row per draft position: its matcher walks the drafts
  // and is rolled back after (the tokens the step accepts come back through accept_outputs).
  GrammarBitmaskFuture fill_async(const SchedulerOutput& so, std::shared_future<void> ready);

  // Tokens a matcher refused since start (the mask should make this impossible; for tests).
  int64_t num_rejected_tokens() const { return num_rejected_.load(); }
  // Steps whose masks were filled, and the wall time the fills took (logged at destruction).
  int64_t num_fills() const { return num_fills_.load(); }
  double fill_ms() const { return fill_us_.load() / 1000.0; }

 private:
  // What a fill touches: the matcher and the tokens folded back since its last fill.
  struct Row {
    std::string req_id;
    std::unique_ptr<structured::GrammarMatcher> matcher;
    std::vector<TokenId> pending;
  };
  struct Entry {
    std::shared_ptr<Row> row;
    std::vector<TokenId> starts_after;  // empty: active from the first output token
    std::vector<TokenId> tail;          // the last output tokens, while waiting for starts_after
    bool active = true;
  };
  // One request's rows of a step: positions first_position..drafts.size() (see GrammarBitmask).
  struct RowJob {
    std::shared_ptr<Row> row;
    std::vector<TokenId> drafts;  // the step's drafts to verify, if any
    int32_t first_position = 0;   // > 0: the grammar starts inside the drafts (reasoning ends there)
    size_t first_mask_row = 0;
    size_t num_mask_rows() const { return drafts.size() - static_cast<size_t>(first_position) + 1; }
  };
  struct Task {
    std::shared_future<void> ready;
    std::vector<RowJob> jobs;
    size_t num_mask_rows = 0;
    std::promise<std::shared_ptr<const GrammarBitmask>> result;
  };
  void loop();
  void fill_rows(Task& task, GrammarBitmask& mask, size_t begin, size_t end);
  static bool ends_with(const std::vector<TokenId>& seq, const std::vector<TokenId>& suffix);
  // For a request still reasoning: the first draft position its grammar constrains (the drafts
  // end the reasoning before it), or -1 when the step stays unconstrained.
  static int32_t first_constrained_position(const Entry& e, const std::vector<TokenId>& drafts);

  const int32_t words_per_row_;
  std::unordered_map<std::string, Entry> entries_;
  std::atomic<int64_t> num_rejected_{0};
  std::atomic<int64_t> num_fills_{0}, fill_us_{0}, max_fill_us_{0};
  BlockingQueue<Task> tasks_;
  std::thread worker_;
  // Rows of a large step are split over helpers (hosts with cores to spare: a quarter of them, at
  // most 3), so a batch of long masks still fits inside one forward pass.
  BlockingQueue<std::function<void()>> helper_jobs_;
  std::vector<std::thread> helpers_;
};

}  // namespace kvasir
