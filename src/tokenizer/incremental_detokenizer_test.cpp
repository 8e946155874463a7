// Streaming detokenization: for random id sequences (uniform ids, byte-token runs, special
// tokens, encodings of Unicode-heavy text) every delta is valid UTF-8 and the deltas plus flush()
// join to exactly decode(all ids), on hand-made vocabularies and on the real models when present.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>

#include "common/utf8.h"
#include "tokenizer/hf_loader.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/vocab_spec.h"
#ifdef KVASIR_TOKENIZER_HAS_GGUF
#include "tokenizer/gguf_vocab.h"
#endif

namespace kvasir {
namespace {

struct Named {
  std::string name;
  std::shared_ptr<const Tokenizer> tok;
};

VocabSpec small_spm(bool space_prefix) {
  VocabSpec v;
  v.model = "llama";
  v.add_space_prefix = space_prefix;
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81\xE2\x96\x81"};
  v.scores = {0, 0, 0, -1, -2, -3, -4, -5, -6};
  v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.scores.push_back(0);
    v.token_types.push_back(6);
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

std::vector<Named> load_tokenizers() {
  std::vector<Named> out;
  for (bool prefix : {true, false}) {
    auto t = tokenizer_from_vocab_spec(small_spm(prefix));
    if (t.ok()) out.push_back({prefix ? "spm_prefix" : "spm", std::make_shared<Tokenizer>(std::move(*t))});
  }
  const std::string models = std::string(KVASIR_SOURCE_DIR) + "/models/";
  for (const char* dir : {"smollm2-hf", "gemma3-hf"}) {
    if (!std::filesystem::exists(models + dir + "/tokenizer.json")) continue;
    auto t = load_hf_tokenizer(models + dir);
    if (t.ok()) out.push_back({dir, std::make_shared<Tokenizer>(std::move(*t))});
  }
#ifdef KVASIR_TOKENIZER_HAS_GGUF
  for (const char* f : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    if (!std::filesystem::exists(models + f)) continue;
    auto g = GgufFile::open(models + f);
    if (!g.ok()) continue;
    auto t = tokenizer_from_gguf(**g);
    if (t.ok()) out.push_back({f, std::make_shared<Tokenizer>(std::move(*t))});
  }
#endif
  return out;
}

// Loaded once: the real vocabularies take a moment to build.
const std::vector<Named>& tokenizers() {
  static const std::vector<Named> all = load_tokenizers();
  return all;
}

// Streams `ids` and checks the deltas against decode(); returns the joined text.
void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                  const std::string& what) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    std::string delta = detok.step(id);
    ASSERT_TRUE(utf8_valid(delta)) << what;
    joined += delta;
  }
  std::string rest = detok.flush();
  ASSERT_TRUE(utf8_valid(rest)) << what;
  joined += rest;
  ASSERT_EQ(joined, tok.decode(ids, skip_special)) << what;
  ASSERT_EQ(detok.text(), joined);
}

std::vector<int32_t> byte_token_ids(const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (size_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_byte_fallback_token(static_cast<int32_t>(id))) out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

TEST(IncrementalDetokenizer, RandomIdsJoinToDecode) {
  auto toks = tokenizers();
  ASSERT_GE(toks.size(), 2u);
  std::mt19937 rng(1234);
  for (const auto& [name, tok] : toks) {
    SCOPED_TRACE(name);
    const auto bytes = byte_token_ids(*tok);
    std::vector<int32_t> specials;
    for (const auto& a : tok->added_tokens()) specials.push_back(a.id);
    std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(tok->vocab_size()) - 1);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids;
      int len = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) {
        uint32_t r = rng() % 10;
        if (r < 3 && !bytes.empty()) {
          ids.push_back(bytes[rng() % bytes.size()]);
        } else if (r < 4 && !specials.empty()) {
          ids.push_back(specials[rng() % specials.size()]);
        } else {
          ids.push_back(any(rng));
        }
      }
      check_stream(*tok, ids, trial % 2 == 0, name + " trial " + std::to_string(trial));
    }
  }
}

TEST(IncrementalDetokenizer, EncodedUnicodeTextStreamsBack) {
  const std::vector<std::string> texts = {
      "Hello world, this is a test.", " leading space", "  two leading spaces",
      "emoji \xF0\x9F\xA6\x99\xF0\x9F\x98\x81 and CJK \xE6\x88\x91\xE6\x83\xB3",
      "Ti\xE1\xBA\xBFng Vi\xE1\xBB\x87t, \xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE, \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
      "tabs\tand\nnewlines\n\n  end ", "\xE2\x80\x8D\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"};
  for (const auto& [name, tok] : tokenizers()) {
    SCOPED_TRACE(name);
    for (const std::string& text : texts) {
      for (bool special : {false, true}) {
        std::vector<int32_t> ids = tok->encode(text, special);
        check_stream(*tok, ids, false, text);
        check_stream(*tok, ids, true, text);
      }
    }
  }
}

TEST(IncrementalDetokenizer, HoldsIncompleteCharactersUntilComplete) {
  auto t = tokenizer_from_vocab_spec(small_spm(true));
  ASSERT_TRUE(t.ok());
  const int32_t base = 9;  // <0x00>
  IncrementalDetokenizer d(*t, true);
  EXPECT_EQ(d.step(6), "a");           // "▁a": the leading space is dropped at text start
  EXPECT_EQ(d.step(base + 0xE2), "");  // first byte of U+2192
  EXPECT_EQ(d.step(base + 0x86), "");
  EXPECT_EQ(d.step(base + 0x92), "");  // complete, but a run of byte tokens stays open
  EXPECT_EQ(d.step(6), "\xE2\x86\x92 a");
  EXPECT_EQ(d.flush(), "");
}

TEST(IncrementalDetokenizer, PromptContextKeepsLeadingSpace) {
  auto t = tokenizer_from_vocab_spec(small_spm(true));
  ASSERT_TRUE(t.ok());
  const std::vector<int32_t> prompt = {1, 6};
  IncrementalDetokenizer d(*t, true, prompt);
  EXPECT_EQ(d.step(6), " a");
}

}  // namespace
}  // namespace kvasir
