#include "engine/structured_output_manager.h"

#include <algorithm>
#include <chrono>
#include <latch>
#include <span>

#include "common/log.h"
#include "sample/token_bitmask.h"
#include "structured/grammar_matcher.h"

namespace kvasir {

StructuredOutputManager::StructuredOutputManager(int32_t vocab_size)
    : words_per_row_(token_bitmask_words(vocab_size)), worker_([this] { loop(); }) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned num_helpers = std::min(3u, cores / 4);
  for (unsigned i = 0; i < num_helpers; ++i) {
    helpers_.emplace_back([this] {
      while (auto job = helper_jobs_.pop()) (*job)();
    });
  }
}

StructuredOutputManager::~StructuredOutputManager() {
  tasks_.close();
  if (worker_.joinable()) worker_.join();
  helper_jobs_.close();
  for (auto& t : helpers_) t.join();
  if (num_fills_ > 0) {
    KVASIR_LOG_INFO("grammar masks: %lld steps filled, %.3f ms per step on average, %.3f ms at most",
                    static_cast<long long>(num_fills_.load()), fill_ms() / static_cast<double>(num_fills_.load()),
                    max_fill_us_.load() / 1000.0);
  }
}

bool StructuredOutputManager::ends_with(const std::vector<TokenId>& seq, const std::vector<TokenId>& suffix) {
  return seq.size() >= suffix.size() && std::equal(suffix.rbegin(), suffix.rend(), seq.rbegin());
}

void StructuredOutputManager::add_request(const Request& request) {
  if (!request.grammar()) return;
  Entry e;
  e.row = std::make_shared<Row>();
  e.row->req_id = request.req_id();
  e.row->matcher = std::make_unique<structured::GrammarMatcher>(request.grammar());
  e.starts_after = request.grammar_starts_after();
  if (!e.starts_after.empty()) {
    // As vLLM: a prompt that already holds the end of reasoning (a template that closes an empty
    // think block) constrains from the first token.
    auto p = request.prompt_token_ids();
    e.active = std::search(p.begin(), p.end(), e.starts_after.begin(), e.starts_after.end()) != p.end();
  }
  entries_[request.req_id()] = std::move(e);
}

void StructuredOutputManager::remove_request(const std::string& req_id) { entries_.erase(req_id); }

void StructuredOutputManager::accept_outputs(const EngineCoreOutputs& outs) {
  if (entries_.empty()) return;
  for (const EngineCoreOutput& o : outs.outputs) {
    auto it = entries_.find(o.req_id);
    if (it == entries_.end()) continue;
    if (o.finished()) {
      entries_.erase(it);
      continue;
    }
    Entry& e = it->second;
    for (TokenId t : o.new_token_ids) {
      if (!e.active) {
        e.tail.push_back(t);
        if (e.tail.size() > e.starts_after.size()) e.tail.erase(e.tail.begin());
        if (ends_with(e.tail, e.starts_after)) {
          e.active = true;
          e.tail.clear();
        }
        continue;
      }
      e.row->pending.push_back(t);
    }
  }
}

int32_t StructuredOutputManager::first_constrained_position(const Entry& e, const std::vector<TokenId>& drafts) {
  std::vector<TokenId> tail = e.tail;
  for (size_t j = 0; j < drafts.size(); ++j) {
    tail.push_back(drafts[j]);
    if (tail.size() > e.starts_after.size()) tail.erase(tail.begin());
    if (ends_with(tail, e.starts_after)) return static_cast<int32_t>(j) + 1;
  }
  return -1;
}

GrammarBitmaskFuture StructuredOutputManager::fill_async(const SchedulerOutput& so, std::shared_future<void> ready) {
  Task task;
  task.ready = std::move(ready);
  for (const std::string& id : so.structured_output_req_ids) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    RowJob job;
    job.row = it->second.row;
    auto d = so.scheduled_spec_decode_tokens.find(id);
    if (d != so.scheduled_spec_decode_tokens.end()) job.drafts = d->second;
    if (!it->second.active) {
      job.first_position = first_constrained_position(it->second, job.drafts);
      if (job.first_position < 0) continue;
    }
    job.first_mask_row = task.num_mask_rows;
    task.num_mask_rows += job.num_mask_rows();
    task.jobs.push_back(std::move(job));
  }
  if (task.jobs.empty()) return {};
  GrammarBitmaskFuture f = task.result.get_future().share();
  tasks_.push(std::move(task));
  return f;
}

void StructuredOutputManager::fill_rows(Task& task, GrammarBitmask& mask, size_t begin, size_t end) {
  const size_t w = static_cast<size_t>(words_per_row_);
  for (size_t i = begin; i < end; ++i) {
    RowJob& job = task.jobs[i];
    Row& row = *job.row;
    for (TokenId t : row.pending) {
      if (!row.matcher->accept_token(t)) {
        ++num_rejected_;
        KVASIR_LOG_WARN("grammar of request %s refused token %d", row.req_id.c_str(), t);
      }
    }
    row.pending.clear();
    // Walks the drafts: the row of position p is the mask after drafts [first, p). A draft the
    // matcher refuses is mostly refused by its own row too, so verification stops there and the
    // rows after it are never read (left all-allowed). The exception is a terminated matcher
    // (a stop token accepted; with ignore_eos the output goes on): its rows allow only the stop
    // tokens, which it no longer accepts, so every row after it is that same stop-only row.
    int32_t walked = 0;
    enum class After { kWalking, kUnreachable, kSameRow } after = After::kWalking;
    int32_t* out = mask.words.data() + job.first_mask_row * w;
    const auto num_drafts = static_cast<int32_t>(job.drafts.size());
    for (int32_t p = job.first_position; p <= num_drafts; ++p, out += w) {
      if (after == After::kUnreachable) {
        std::fill(out, out + w, -1);
        continue;
      }
      if (after == After::kSameRow) {
        std::copy(out - w, out, out);
        continue;
      }
      row.matcher->fill_bitmask(std::span<int32_t>(out, w));
      if (p == num_drafts) break;
      const TokenId draft = job.drafts[static_cast<size_t>(p)];
      if (row.matcher->accept_token(draft)) {
        ++walked;
      } else {
        after = structured::bitmask_allows(std::span<const int32_t>(out, w), draft) ? After::kSameRow
                                                                                    : After::kUnreachable;
      }
    }
    row.matcher->rollback(walked);
  }
}

void StructuredOutputManager::loop() {
  // Below this many rows a step is filled on this thread alone: handing rows out costs more.
  constexpr size_t kRowsPerHelper = 8;
  while (auto task = tasks_.pop()) {
    if (task->ready.valid()) task->ready.wait();
    const auto t0 = std::chrono::steady_clock::now();
    auto mask = std::make_shared<GrammarBitmask>();
    const size_t n = task->jobs.size();
    mask->words_per_row = words_per_row_;
    mask->words.assign(task->num_mask_rows * static_cast<size_t>(words_per_row_), 0);
    mask->req_ids.reserve(task->num_mask_rows);
    mask->positions.reserve(task->num_mask_rows);
    for (const RowJob& job : task->jobs) {
      for (size_t r = 0; r < job.num_mask_rows(); ++r) {
        mask->req_ids.push_back(job.row->req_id);
        mask->positions.push_back(job.first_position + static_cast<int32_t>(r));
      }
    }
    const size_t parts = std::min(helpers_.size() + 1, std::max<size_t>(1, n / kRowsPerHelper));
    if (parts <= 1) {
      fill_rows(*task, *mask, 0, n);
    } else {
      // Each matcher is touched by exactly one thread; the latch orders their writes before the
      // result is published.
      std::latch done(static_cast<std::ptrdiff_t>(parts - 1));
      const size_t chunk = (n + parts - 1) / parts;
      for (size_t p = 1; p < parts; ++p) {
        const size_t b = std::min(n, p * chunk), e = std::min(n, b + chunk);
        helper_jobs_.push([this, &task, &mask, &done, b, e] {
          fill_rows(*task, *mask, b, e);
          done.count_down();
        });
      }
      fill_rows(*task, *mask, 0, std::min(n, chunk));
      done.wait();
    }
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    ++num_fills_;
    fill_us_ += us;
    if (us > max_fill_us_.load()) max_fill_us_ = us;
    task->result.set_value(std::move(mask));
  }
}

}  // namespace kvasir
