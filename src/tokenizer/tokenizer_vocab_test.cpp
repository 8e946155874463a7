// llama.cpp's tokenizer test vectors (shared/testdata/tokenizer, see its MANIFEST.md): each
// vocab-only GGUF must encode every .inp string to the ids in .out (HF's encode with
// add_special_tokens=False) and, except BERT's lowercasing WordPiece, decode them back. llama-bpe and qwen2 come without a GGUF: their
// .out ids are checked against the real vocabularies when a tokenizer.json for them is present.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "tokenizer/hf_loader.h"
#include "tokenizer/vocab_spec.h"

namespace kvasir {
namespace {

// shared/ sits beside the checkout (or where $KVASIR_SHARED_TESTDATA says); a missing directory
// skips the GGUF cases.
std::string find_test_dir() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KVASIR_SHARED_TESTDATA"); env != nullptr && *env) {
    dirs.push_back(std::string(env) + "/tokenizer/");
  }
  dirs.push_back(std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata/tokenizer/");
  dirs.push_back(std::string(KVASIR_SOURCE_DIR) + "/shared/testdata/tokenizer/");
  for (const std::string& d : dirs) {
    if (std::filesystem::exists(d + "MANIFEST.md")) return d;
  }
  return dirs.back();
}
const std::string kDir = find_test_dir();

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> read_inputs(const std::string& path) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string s = slurp(path);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = s.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(s.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

struct Case {
  const char* name;
  bool round_trip;  // decode(encode(s)) == s for every input
};

class VocabTest : public ::testing::TestWithParam<Case> {};

TEST_P(VocabTest, EncodesLikeHuggingFace) {
  const Case c = GetParam();
  const std::string base = kDir + "ggml-vocab-" + c.name + ".gguf";
  if (!std::filesystem::exists(base)) GTEST_SKIP() << "missing " << base;
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tok = tokenizer_from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto inputs = read_inputs(base + ".inp");
  const auto expected = read_outputs(base + ".out");
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> got = tok->encode(inputs[i], /*add_special_tokens=*/false);
    EXPECT_EQ(got, expected[i]) << c.name << " test " << i << ": '" << inputs[i] << "'";
    failures += got != expected[i];
    if (c.round_trip) {
      EXPECT_EQ(tok->decode(expected[i], false), inputs[i]) << c.name << " test " << i;
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, VocabTest,
                         ::testing::Values(Case{"llama-spm", true}, Case{"phi-3", true}, Case{"gpt-2", true},
                                           Case{"falcon", true}, Case{"deepseek-coder", true},
                                           Case{"mpt", true}, Case{"bert-bge", false}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// BERT lowercases and drops accents, so its decode is not the input; it is HF's decode: the
// words joined by spaces, with HF's cleanup of spaces before punctuation.
TEST(VocabFiles, BertWordPieceDecodesAndAddsClsSep) {
  const std::string path = kDir + "ggml-vocab-bert-bge.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer_from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::vector<int32_t> ids = tok->encode("Hello, World! Don't stop unbelievably", false);
  // HF's WordPiece decoder gives exactly this (its cleanup works token by token, so "don ' t"
  // keeps its spaces).
  EXPECT_EQ(tok->decode(ids, false), "hello, world! don ' t stop unbelievably");
  const std::vector<int32_t> with_special = tok->encode("Hello", true);
  ASSERT_EQ(with_special.size(), 3u);
  EXPECT_EQ(with_special.front(), 101);  // [CLS]
  EXPECT_EQ(with_special.back(), 102);   // [SEP]
  EXPECT_EQ(tok->decode(with_special, true), "hello");
}

// The same vocabulary as GGUF metadata would give it: tokens by id, "a b" merges, a pre name.
VocabSpec spec_from_tokenizer_json(const std::string& path, const std::string& pre) {
  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = pre;
  auto text = read_text_file(path + "/tokenizer.json");
  EXPECT_TRUE(text.ok());
  auto root = parse_json(*text);
  EXPECT_TRUE(root.ok());
  const Json& model = *root->find("model");
  const Json& vocab = *model.find("vocab");
  spec.tokens.resize(vocab.size());
  for (const auto& [token, id] : vocab.as_object()) spec.tokens[static_cast<size_t>(id.as_int())] = token;
  for (const Json& m : model.find("merges")->as_array()) {
    spec.merges.push_back(m.is_string() ? m.as_string() : m.as_array()[0].as_string() + " " + m.as_array()[1].as_string());
  }
  return spec;
}

// llama-bpe / qwen2 come with ids only. Given a tokenizer.json of that family (a directory in
// env KVASIR_LLAMA3_TOKENIZER / KVASIR_QWEN2_TOKENIZER, or models/{llama3,qwen2}-tiktoken as
// written by `scripts/gen_tokenizer_golden.py --rebuild-tiktoken`), both the tokenizer.json loader
// and the GGUF path (same vocabulary, pre-tokenizer chosen by the llama.cpp pre name) must
// reproduce the ids and decode them back.
TEST(VocabFiles, IdOnlyVocabsWithTokenizerJson) {
  int checked = 0;
  for (auto [name, env, dir] : {std::tuple{"llama-bpe", "KVASIR_LLAMA3_TOKENIZER", "llama3-tiktoken"},
                                std::tuple{"qwen2", "KVASIR_QWEN2_TOKENIZER", "qwen2-tiktoken"}}) {
    std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/" + dir;
    if (const char* e = std::getenv(env); e != nullptr) path = e;
    if (!std::filesystem::exists(path + "/tokenizer.json")) continue;
    auto tok = load_hf_tokenizer(path);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto gguf_like = tokenizer_from_vocab_spec(spec_from_tokenizer_json(path, name));
    ASSERT_TRUE(gguf_like.ok()) << gguf_like.status().to_string();
    const std::string base = kDir + "ggml-vocab-" + name + ".gguf";
    const auto inputs = read_inputs(base + ".inp");
    const auto expected = read_outputs(base + ".out");
    ASSERT_EQ(inputs.size(), expected.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_EQ(tok->encode(inputs[i], false), expected[i]) << name << " test " << i;
      EXPECT_EQ(gguf_like->encode(inputs[i], false), expected[i]) << name << " (gguf pre) test " << i;
      EXPECT_EQ(tok->decode(expected[i], false), inputs[i]) << name << " test " << i;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "set KVASIR_LLAMA3_TOKENIZER / KVASIR_QWEN2_TOKENIZER to run";
}

}  // namespace
}  // namespace kvasir
