// GrammarCompiler: turns a request's StructuredOutputSpec into a CompiledGrammar over one model's
// vocabulary (XGrammar underneath, hidden here). Everything in a spec is untrusted: a bad schema,
// regex, grammar or structural tag gives a Status, never an abort or an escaping exception:
// InvalidArgument for malformed or unsatisfiable input, Unimplemented for a JSON-schema keyword
// that XGrammar would not enforce (docs/STRUCTURED_OUTPUTS.md: a schema is never silently
// weakened). Compiles are cached by spec (bounded LRU) and can run on the compiler's own small
// thread pool (compile_async) so the engine thread never waits on one. Thread-safe.
// Must not know about requests, sequences or logits (GrammarMatcher holds a sequence's state).
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "common/status.h"
#include "core/structured_output_spec.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::structured {

// Immutable and shareable between matchers and threads; defined inside structured/.
class CompiledGrammar;
using CompiledGrammarPtr = std::shared_ptr<const CompiledGrammar>;
using CompileResult = StatusOr<CompiledGrammarPtr>;

struct GrammarCompilerOptions {
  int32_t num_threads = 2;                   // compile_async workers
  int32_t compile_threads = 1;               // XGrammar's own threads inside one compile
  size_t max_cache_entries = 512;            // LRU over specs (failed compiles are cached too)
  size_t max_cache_bytes = size_t{1} << 30;  // compiled grammars' memory, LRU-evicted past this
  size_t max_spec_bytes = size_t{1} << 20;   // larger schema/regex/grammar text is refused
  // JSON schemas: any whitespace between JSON tokens (JSON's own rule), or none at all.
  bool json_any_whitespace = true;
  int32_t json_max_whitespace = 0;  // > 0: at most this many in a row (stops newline loops)
  // true: properties and array items that the schema leaves open are forbidden (vLLM's default,
  // a narrowing); false: exactly what the schema allows.
  bool json_strict = false;
};

class GrammarCompiler {
 public:
  // `model_vocab_size`: the logits width, at least tokenizer.vocab_size(); ids past the
  // tokenizer's are never allowed. `stop_token_ids`: the tokens that end the output (allowed
  // once the grammar is complete), non-empty.
  static StatusOr<std::unique_ptr<GrammarCompiler>> create(const Tokenizer& tokenizer, int32_t model_vocab_size,
                                                           std::vector<int32_t> stop_token_ids,
                                                           GrammarCompilerOptions options = {});
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Compiles on the calling thread (or waits for the same spec already compiling); cached.
  CompileResult compile(const StructuredOutputSpec& spec);
  // Compiles on the compiler's thread pool; a cached or in-flight spec returns its future.
  std::shared_future<CompileResult> compile_async(const StructuredOutputSpec& spec);

  int32_t model_vocab_size() const;
  int32_t tokenizer_vocab_size() const;
  const std::vector<int32_t>& stop_token_ids() const;

  struct CacheStats {
    size_t num_entries = 0;
    size_t memory_bytes = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  CacheStats cache_stats() const;

 private:
  struct Impl;
  explicit GrammarCompiler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::structured
