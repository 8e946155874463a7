// CompiledGrammar's definition, for structured/'s own files only: XGrammar's compiled grammar plus
// the vocabulary facts a matcher checks before calling into XGrammar. It includes XGrammar's
// headers, which is why no public header includes this one. Immutable after construction.
#pragma once

#include <xgrammar/xgrammar.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/structured_output_spec.h"
#include "structured/grammar_compiler.h"

namespace kvasir::structured {

// Shared by every grammar of one compiler.
struct VocabFacts {
  int32_t model_vocab_size = 0;
  int32_t tokenizer_vocab_size = 0;
  std::vector<int32_t> stop_token_ids;
  // [model_vocab_size]: 1 when the grammar may ever allow the id (a token with bytes, or a stop
  // token). Special and padding ids are rejected before XGrammar sees them (it logs each one).
  std::vector<uint8_t> selectable;
};

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar grammar, std::shared_ptr<const VocabFacts> vocab)
      : grammar_(std::move(grammar)), vocab_(std::move(vocab)), memory_bytes_(grammar_.MemorySizeBytes()) {}

  const xgrammar::CompiledGrammar& xgrammar() const { return grammar_; }
  const VocabFacts& vocab() const { return *vocab_; }
  size_t memory_bytes() const { return memory_bytes_; }

 private:
  xgrammar::CompiledGrammar grammar_;
  std::shared_ptr<const VocabFacts> vocab_;
  size_t memory_bytes_;
};

struct CompileSettings {
  bool json_any_whitespace = true;
  int32_t json_max_whitespace = 0;
  bool json_strict = false;
  size_t max_spec_bytes = 0;
};

// One uncached compile (spec_compile.cpp): validation, the keyword policy, then XGrammar, with
// every exception turned into a Status.
CompileResult compile_spec(xgrammar::GrammarCompiler& compiler, const std::shared_ptr<const VocabFacts>& vocab,
                           const StructuredOutputSpec& spec, const CompileSettings& settings);

}  // namespace kvasir::structured
