// The bytes given to the grammar engine for each token are what the token writes into the
// output: encoding a text and joining its tokens' bytes gives the text back, byte for byte, on
// SmolLM2's byte-level BPE and Gemma-3's SentencePiece with byte fallback; special tokens get no
// bytes; a byte token gives exactly its byte.
#include "structured/token_vocab.h"

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "structured/structured_test_util.h"

namespace kvasir::structured {
namespace {

using testing::gemma3;
using testing::smollm2;
using testing::tiny_tokenizer;

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello world",
      " leading space and trailing  ",
      "{\"name\": \"Kvasir\", \"tags\": [1, 2.5e-3, true, null]}",
      "line one\nline two\r\n\ttabbed\n\n\n",
      "    four spaces, then\t\ttabs",
      "caf\xC3\xA9 na\xC3\xAF"
      "ve \xC3\xBC"
      "ber",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0",  // Japanese
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xE2\x9C\x94",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80",  // Russian
      "int main() { return a->b[0] << 2; } // code",
      "URL: https://example.com/a?b=c&d=%20#frag",
      "a literal <0x41> is text",
      "numbers 0123456789 3.14159 -42 1e10",
      "mixed \xCE\xB1\xCE\xB2\xCE\xB3 Greek, \xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A Arabic, \xED\x95\x9C Korean",
      "rare \xF0\x90\x8D\x88 gothic and \xE2\x80\x8B zero-width",
      "   ",
      "a",
  };
  return t;
}

void check_round_trip(const Tokenizer& tok, const std::string& name) {
  auto vocab = build_token_vocab(tok);
  ASSERT_TRUE(vocab.ok()) << vocab.status().to_string();
  ASSERT_EQ(vocab->token_bytes.size(), tok.vocab_size());
  // A SentencePiece vocabulary with a space prefix writes one space in front of the first word.
  const std::string probe = tok.decode_continuation(tok.encode("x", false), false);
  const bool adds_prefix_space = probe == " x";
  for (const std::string& text : texts()) {
    std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/false);
    std::string joined;
    for (int32_t id : ids) joined += vocab->token_bytes[id];
    std::string expected = adds_prefix_space ? " " + text : text;
    EXPECT_EQ(joined, expected) << name << " text: " << text;
    EXPECT_EQ(joined, tok.decode_continuation(ids, false)) << name << " text: " << text;
  }
}

TEST(TokenVocab, EncodeThenJoinGivesTheTextBackOnSmolLM2) {
  auto tok = smollm2();
  if (!tok) GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf missing (scripts/fetch_models.sh)";
  check_round_trip(*tok, "smollm2");
}

TEST(TokenVocab, EncodeThenJoinGivesTheTextBackOnGemma3) {
  auto tok = gemma3();
  if (!tok) GTEST_SKIP() << "models/gemma-3-270m-q4_k_m.gguf missing (scripts/fetch_models.sh)";
  check_round_trip(*tok, "gemma3");
}

TEST(TokenVocab, EncodeThenJoinGivesTheTextBackOnATinyByteFallbackVocab) {
  check_round_trip(tiny_tokenizer(), "tiny");
}

TEST(TokenVocab, SpecialTokensHaveNoBytesAndByteTokensOneByte) {
  for (auto tok : {smollm2(), gemma3()}) {
    if (!tok) continue;
    auto vocab = build_token_vocab(*tok);
    ASSERT_TRUE(vocab.ok());
    int32_t num_special = 0, num_byte = 0;
    for (size_t id = 0; id < tok->vocab_size(); ++id) {
      auto i = static_cast<int32_t>(id);
      if (tok->is_special(i)) {
        ++num_special;
        EXPECT_TRUE(vocab->token_bytes[id].empty()) << *tok->id_to_token(i);
      }
      if (tok->is_byte_fallback_token(i)) {
        ++num_byte;
        ASSERT_EQ(vocab->token_bytes[id].size(), 1u) << *tok->id_to_token(i);
        unsigned value = 0;
        std::sscanf(std::string(*tok->id_to_token(i)).c_str(), "<0x%02X>", &value);
        EXPECT_EQ(static_cast<unsigned char>(vocab->token_bytes[id][0]), value);
      }
    }
    EXPECT_GT(num_special, 0);
    EXPECT_GE(vocab->num_special, num_special);
    EXPECT_TRUE(vocab->token_bytes[tok->eos_id()].empty());
  }
}

// Byte-level BPE holds tokens that are part of a UTF-8 character: their raw bytes, not U+FFFD.
TEST(TokenVocab, PartialUtf8TokensKeepTheirRawBytes) {
  auto tok = smollm2();
  if (!tok) GTEST_SKIP() << "SmolLM2 missing";
  auto vocab = build_token_vocab(*tok);
  ASSERT_TRUE(vocab.ok());
  int32_t partial = 0;
  for (const std::string& b : vocab->token_bytes) {
    if (!b.empty() && !utf8_valid(b)) ++partial;
  }
  EXPECT_GT(partial, 0);
}

}  // namespace
}  // namespace kvasir::structured
