#include "engine/structured_output_manager.h"

#include <algorithm>
#include <span>

#include "common/log.h"
#include "sample/token_bitmask.h"
#include "structured/grammar_matcher.h"

namespace kvasir {

StructuredOutputManager::StructuredOutputManager(int32_t vocab_size)
    : words_per_row_(token_bitmask_words(vocab_size)), worker_([this] { loop(); }) {}

StructuredOutputManager::~StructuredOutputManager() {
  tasks_.close();
  if (worker_.joinable()) worker_.join();
}

bool StructuredOutputManager::ends_with(const std::vector<TokenId>& seq, const std::vector<TokenId>& suffix) {
  return seq.size() >= suffix.size() && std::equal(suffix.rbegin(), suffix.rend(), seq.rbegin());
}

void StructuredOutputManager::add_request(const Request& request) {
  if (!request.grammar()) return;
  Entry e;
  e.matcher = std::make_shared<structured::GrammarMatcher>(request.grammar());
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
      if (!e.matcher->accept_token(t)) {
        ++num_rejected_;
        KVASIR_LOG_WARN("grammar of request %s refused token %d", o.req_id.c_str(), t);
      }
    }
  }
}

GrammarBitmaskFuture StructuredOutputManager::fill_async(const SchedulerOutput& so, std::shared_future<void> ready) {
  Task task;
  task.ready = std::move(ready);
  for (const std::string& id : so.structured_output_req_ids) {
    auto it = entries_.find(id);
    if (it == entries_.end() || !it->second.active) continue;
    task.rows.emplace_back(id, it->second.matcher);
  }
  if (task.rows.empty()) return {};
  GrammarBitmaskFuture f = task.result.get_future().share();
  tasks_.push(std::move(task));
  return f;
}

void StructuredOutputManager::loop() {
  while (auto task = tasks_.pop()) {
    if (task->ready.valid()) task->ready.wait();
    auto mask = std::make_shared<GrammarBitmask>();
    mask->words_per_row = words_per_row_;
    mask->words.assign(task->rows.size() * static_cast<size_t>(words_per_row_), 0);
    mask->req_ids.reserve(task->rows.size());
    for (size_t i = 0; i < task->rows.size(); ++i) {
      mask->req_ids.push_back(task->rows[i].first);
      task->rows[i].second->fill_bitmask(std::span<int32_t>(
          mask->words.data() + i * static_cast<size_t>(words_per_row_), static_cast<size_t>(words_per_row_)));
    }
    task->result.set_value(std::move(mask));
  }
}

}  // namespace kvasir
