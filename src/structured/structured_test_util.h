// Shared by structured/'s tests: the real vocabularies (SmolLM2's byte-level BPE and Gemma-3's
// SentencePiece with byte fallback, from models/; nullptr when absent), a tiny SentencePiece
// vocabulary that compiles in milliseconds, the shared test data directory, and a random walk that
// samples allowed tokens until the grammar terminates.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loader/gguf_file.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "structured/tiny_vocab_test_util.h"
#include "tokenizer/gguf_vocab.h"

namespace kvasir::structured::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// shared/testdata beside the checkout, or $KVASIR_SHARED_TESTDATA.
inline std::string shared_testdata() {
  if (const char* env = std::getenv("KVASIR_SHARED_TESTDATA"); env != nullptr && *env) return env;
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata";
}

inline std::shared_ptr<const Tokenizer> load_gguf_tokenizer(const std::string& file) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/" + file;
  if (!std::filesystem::exists(path)) return nullptr;
  auto gguf = GgufFile::open(path);
  if (!gguf.ok()) return nullptr;
  auto tok = tokenizer_from_gguf(**gguf);
  if (!tok.ok()) return nullptr;
  return std::make_shared<const Tokenizer>(std::move(*tok));
}

inline std::shared_ptr<const Tokenizer> smollm2() {
  static const auto tok = load_gguf_tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf");
  return tok;
}

inline std::shared_ptr<const Tokenizer> gemma3() {
  static const auto tok = load_gguf_tokenizer("gemma-3-270m-q4_k_m.gguf");
  return tok;
}

// tiny_vocab_spec() as a tokenizer.
inline const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = [] {
    auto t = tokenizer_from_vocab_spec(tiny_vocab_spec());
    if (!t.ok()) std::abort();
    return std::move(*t);
  }();
  return tok;
}

inline std::unique_ptr<GrammarCompiler> make_compiler(const Tokenizer& tok, GrammarCompilerOptions options = {},
                                                      int32_t extra_ids = 0) {
  auto c = GrammarCompiler::create(tok, static_cast<int32_t>(tok.vocab_size()) + extra_ids, {tok.eos_id()}, options);
  if (!c.ok()) {
    ADD_FAILURE() << c.status().to_string();
    return nullptr;
  }
  return std::move(*c);
}

inline StructuredOutputSpec spec_of(StructuredOutputSpec::Kind kind, std::string text,
                                    std::vector<std::string> choices = {}) {
  StructuredOutputSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

struct Walk {
  std::string text;         // the bytes of the accepted tokens, stop token excluded
  bool terminated = false;  // ended by a stop token
  int32_t num_tokens = 0;
};

// Samples uniformly among the allowed tokens (stop tokens only when nothing else is allowed, or
// with probability `stop_bias` once allowed) until the matcher terminates or max_tokens.
inline Walk random_walk(const Tokenizer& tok, CompiledGrammarPtr grammar, uint32_t seed, int32_t max_tokens,
                        double stop_bias = 0.3) {
  GrammarMatcher m(grammar);
  std::mt19937 rng(seed);
  std::vector<int32_t> row(bitmask_words(m.model_vocab_size()));
  std::vector<int32_t> allowed, stops;
  Walk w;
  const std::vector<int32_t> stop_ids{tok.eos_id()};
  for (int32_t step = 0; step < max_tokens && !m.is_terminated(); ++step) {
    m.fill_bitmask(row);
    allowed.clear();
    stops.clear();
    for (int32_t id = 0; id < m.model_vocab_size(); ++id) {
      if (!bitmask_allows(row, id)) continue;
      (id == tok.eos_id() ? stops : allowed).push_back(id);
    }
    int32_t pick;
    if (!stops.empty() && (allowed.empty() || std::uniform_real_distribution<double>(0, 1)(rng) < stop_bias)) {
      pick = stops[0];
    } else if (!allowed.empty()) {
      pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    } else {
      ADD_FAILURE() << "no token allowed after " << w.text;
      return w;
    }
    EXPECT_TRUE(m.accept_token(pick)) << "an allowed token was rejected: " << pick;
    ++w.num_tokens;
    if (pick != tok.eos_id()) w.text += *tok.token_bytes(pick);
  }
  w.terminated = m.is_terminated();
  return w;
}

}  // namespace kvasir::structured::testing
