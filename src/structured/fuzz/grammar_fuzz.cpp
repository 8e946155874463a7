// libFuzzer target: what reaches the grammar engine from a request (a JSON schema, regex, choice
// list, GBNF/EBNF grammar or structural tag) -> the keyword policy, the rewrites and XGrammar's
// compiler, then a short walk of the matcher over the compiled grammar. Any input must end in a
// Status or a grammar, never a crash, hang or leak. The first byte picks the kind when it is below
// 6 (StructuredOutputSpec::Kind; choices are the lines of the rest); otherwise the kind is guessed
// from the text, so raw schemas and .gbnf files seed it as they are.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "structured/tiny_vocab_test_util.h"

namespace {

using kvasir::StructuredOutputSpec;
using kvasir::structured::GrammarCompiler;
using kvasir::structured::GrammarMatcher;

// tiny_vocab_spec(): the grammar sees every byte, and compiles stay fast.
const kvasir::Tokenizer& tokenizer() {
  static const kvasir::Tokenizer tok =
      std::move(*kvasir::tokenizer_from_vocab_spec(kvasir::structured::testing::tiny_vocab_spec()));
  return tok;
}

GrammarCompiler& compiler() {
  static const std::unique_ptr<GrammarCompiler> c = [] {
    kvasir::structured::GrammarCompilerOptions options;
    options.num_threads = 1;
    options.max_cache_entries = 4;
    options.max_spec_bytes = 64 * 1024;
    options.max_cache_bytes = 32 << 20;  // XGrammar's rule cache too: the fuzzer makes many grammars
    const kvasir::Tokenizer& tok = tokenizer();
    auto c = GrammarCompiler::create(tok, static_cast<int32_t>(tok.vocab_size()) + 7, {tok.eos_id()}, options);
    return std::move(c).value();
  }();
  return *c;
}

StructuredOutputSpec spec_from(std::string_view in) {
  using Kind = StructuredOutputSpec::Kind;
  StructuredOutputSpec spec;
  if (!in.empty() && static_cast<uint8_t>(in[0]) < 6) {
    spec.kind = static_cast<Kind>(in[0]);
    in.remove_prefix(1);
  } else if (in.find("::=") != std::string_view::npos) {
    spec.kind = Kind::kGrammar;
  } else if (!in.empty() && in[0] == '{' &&
             (in.find("structural_tag") != std::string_view::npos ||
              in.find("\"structures\"") != std::string_view::npos)) {
    spec.kind = Kind::kStructuralTag;
  } else if (!in.empty() && (in[0] == '{' || in[0] == '[' || in[0] == 't' || in[0] == 'f')) {
    spec.kind = Kind::kJsonSchema;
  } else {
    spec.kind = Kind::kRegex;
  }
  if (spec.kind == Kind::kChoice) {
    size_t start = 0;
    while (start <= in.size() && spec.choices.size() < 64) {
      size_t end = in.find('\n', start);
      if (end == std::string_view::npos) end = in.size();
      spec.choices.emplace_back(in.substr(start, end - start));
      start = end + 1;
    }
  } else {
    spec.text = std::string(in);
  }
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  kvasir::structured::CompileResult r = compiler().compile(spec_from(in));
  if (!r.ok()) return 0;
  // A short walk: the input's bytes pick among the allowed tokens.
  GrammarMatcher m(*r);
  std::vector<int32_t> row(kvasir::structured::bitmask_words(m.model_vocab_size()));
  std::vector<int32_t> allowed;
  for (size_t step = 0; step < 24 && !m.is_terminated(); ++step) {
    m.fill_bitmask(row);
    allowed.clear();
    for (int32_t id = 0; id < m.model_vocab_size(); ++id) {
      if (kvasir::structured::bitmask_allows(row, id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    uint8_t pick = size > 0 ? data[step % size] : 0;
    if (!m.accept_token(allowed[(pick * 131u + step) % allowed.size()])) __builtin_trap();
  }
  if (m.num_accepted_steps() > 2) m.rollback(2);
  (void)m.accept_string(in.substr(0, 64));
  (void)m.accept_token(static_cast<int32_t>(size) - 40);
  return 0;
}
