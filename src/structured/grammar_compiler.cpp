#include "structured/grammar_compiler.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/check.h"
#include "structured/compiled_grammar.h"
#include "structured/token_vocab.h"

namespace kvasir::structured {

// The cache maps a spec's key to the future of its compile, in flight or done. An entry's bytes
// are counted once its compile ends; evicting an entry in flight only drops the cache's
// reference (its waiters keep the future).
struct GrammarCompiler::Impl {
  struct Job {
    StructuredOutputSpec spec;
    std::string key;
    uint64_t id = 0;
    std::promise<CompileResult> promise;
  };
  struct Entry {
    std::shared_future<CompileResult> future;
    uint64_t id = 0;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };

  Impl(GrammarCompilerOptions opts, std::shared_ptr<const VocabFacts> vocab_facts, const xgrammar::TokenizerInfo& info)
      : options(opts),
        vocab(std::move(vocab_facts)),
        // XGrammar's own cache shares compiled rules (JSON strings, numbers...) between grammars: a
        // several-fold faster compile. Its whole-grammar entries are the same objects as ours.
        xg(info, std::max(1, opts.compile_threads), /*cache_enabled=*/true,
           static_cast<int64_t>(opts.max_cache_bytes)) {
    settings.json_any_whitespace = opts.json_any_whitespace;
    settings.json_max_whitespace = opts.json_max_whitespace;
    settings.json_strict = opts.json_strict;
    settings.max_spec_bytes = opts.max_spec_bytes;
  }

  ~Impl() {
    std::deque<Job> abandoned;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      abandoned.swap(queue);
    }
    cv.notify_all();
    for (std::thread& t : workers) t.join();
    for (Job& job : abandoned) job.promise.set_value(unavailable("the grammar compiler shut down"));
  }

  // Runs one job and records its size in the cache.
  void run(Job& job) {
    CompileResult result = compile_spec(xg, vocab, job.spec, settings);
    size_t bytes = job.key.size() + (result.ok() ? (*result)->memory_bytes() : 0);
    job.promise.set_value(std::move(result));
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(job.key);
    if (it == cache.end() || it->second.id != job.id) return;
    it->second.bytes = bytes;
    cache_bytes += bytes;
    evict_locked();
  }

  void worker_loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      run(job);
    }
  }

  void start_workers() {
    for (int32_t i = 0; i < std::max(1, options.num_threads); ++i) {
      workers.emplace_back([this] { worker_loop(); });
    }
  }

  void evict_locked() {
    while ((cache.size() > options.max_cache_entries || cache_bytes > options.max_cache_bytes) && cache.size() > 1) {
      auto it = cache.find(lru.back());
      cache_bytes -= it->second.bytes;
      cache.erase(it);
      lru.pop_back();
    }
  }

  // The cached future, or a new entry whose job the caller must run (inline or queued).
  std::shared_future<CompileResult> lookup(const StructuredOutputSpec& spec, std::optional<Job>* job) {
    std::string key = spec.cache_key();
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) {
      ++hits;
      lru.splice(lru.begin(), lru, it->second.lru);
      return it->second.future;
    }
    ++misses;
    job->emplace();
    Job& j = **job;
    j.spec = spec;
    j.key = key;
    j.id = ++next_id;
    Entry e;
    e.future = j.promise.get_future().share();
    e.id = j.id;
    lru.push_front(key);
    e.lru = lru.begin();
    auto future = e.future;
    cache.emplace(std::move(key), std::move(e));
    evict_locked();
    return future;
  }

  GrammarCompilerOptions options;
  CompileSettings settings;
  std::shared_ptr<const VocabFacts> vocab;
  xgrammar::GrammarCompiler xg;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  std::vector<std::thread> workers;
  bool stopping = false;
  std::unordered_map<std::string, Entry> cache;
  std::list<std::string> lru;  // keys, most recently used first
  size_t cache_bytes = 0;
  uint64_t next_id = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
};

StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(const Tokenizer& tokenizer, int32_t model_vocab_size,
                                                                   std::vector<int32_t> stop_token_ids,
                                                                   GrammarCompilerOptions options) {
  const auto tokenizer_vocab_size = static_cast<int32_t>(tokenizer.vocab_size());
  if (model_vocab_size < tokenizer_vocab_size) {
    return invalid_argument("model vocabulary size " + std::to_string(model_vocab_size) +
                            " is smaller than the tokenizer's " + std::to_string(tokenizer_vocab_size));
  }
  if (stop_token_ids.empty()) return invalid_argument("structured outputs need at least one stop token");
  std::sort(stop_token_ids.begin(), stop_token_ids.end());
  stop_token_ids.erase(std::unique(stop_token_ids.begin(), stop_token_ids.end()), stop_token_ids.end());
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= model_vocab_size) {
      return invalid_argument("stop token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  KVASIR_ASSIGN_OR_RETURN(TokenVocab token_vocab, build_token_vocab(tokenizer));

  auto facts = std::make_shared<VocabFacts>();
  facts->model_vocab_size = model_vocab_size;
  facts->tokenizer_vocab_size = tokenizer_vocab_size;
  facts->stop_token_ids = stop_token_ids;
  facts->selectable.assign(model_vocab_size, 0);
  for (int32_t id = 0; id < tokenizer_vocab_size; ++id) {
    facts->selectable[id] = !token_vocab.token_bytes[id].empty();
  }
  for (int32_t id : stop_token_ids) facts->selectable[id] = 1;

  try {
    // RAW: the strings are already the bytes each token writes; "" marks a special token.
    xgrammar::TokenizerInfo info(token_vocab.token_bytes, xgrammar::VocabType::RAW, model_vocab_size, stop_token_ids,
                                 /*add_prefix_space=*/false);
    auto impl = std::make_unique<Impl>(options, std::move(facts), info);
    impl->start_workers();
    return std::unique_ptr<GrammarCompiler>(new GrammarCompiler(std::move(impl)));
  } catch (const std::exception& e) {
    return internal_error(std::string("grammar compiler setup failed: ") + e.what());
  }
}

GrammarCompiler::GrammarCompiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarCompiler::~GrammarCompiler() = default;

CompileResult GrammarCompiler::compile(const StructuredOutputSpec& spec) {
  std::optional<Impl::Job> job;
  std::shared_future<CompileResult> future = impl_->lookup(spec, &job);
  if (job) impl_->run(*job);
  return future.get();
}

std::shared_future<CompileResult> GrammarCompiler::compile_async(const StructuredOutputSpec& spec) {
  std::optional<Impl::Job> job;
  std::shared_future<CompileResult> future = impl_->lookup(spec, &job);
  if (job) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->queue.push_back(std::move(*job));
    }
    impl_->cv.notify_one();
  }
  return future;
}

int32_t GrammarCompiler::model_vocab_size() const {
  return impl_->vocab->model_vocab_size;
}
int32_t GrammarCompiler::tokenizer_vocab_size() const {
  return impl_->vocab->tokenizer_vocab_size;
}
const std::vector<int32_t>& GrammarCompiler::stop_token_ids() const {
  return impl_->vocab->stop_token_ids;
}

GrammarCompiler::CacheStats GrammarCompiler::cache_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  CacheStats s;
  s.num_entries = impl_->cache.size();
  s.memory_bytes = impl_->cache_bytes;
  s.hits = impl_->hits;
  s.misses = impl_->misses;
  return s;
}

}  // namespace kvasir::structured
