// Every pre-tokenizer regex against HF `tokenizers`: tests/data/tokenizer/pretokenizer_golden.json
// (written by scripts/gen_pretokenizer_golden.py) holds a Unicode-heavy corpus and the pieces HF
// cuts it into with each GGUF `pre` name's regexes, with HF's ByteLevel and Whitespace
// pre-tokenizers, and the ids a full HF tokenizer gives the corpus for the byte-level BPE
// vocabularies in ../shared/testdata/tokenizer. A regex that does not compile fails here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/check.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/pattern.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/vocab_spec.h"

namespace kvasir {
namespace {

const std::string kRoot = std::string(KVASIR_SOURCE_DIR) + "/";

// shared/ sits beside the checkout (or where $KVASIR_SHARED_TESTDATA says).
std::string find_testdata_dir() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KVASIR_SHARED_TESTDATA"); env != nullptr && *env) {
    dirs.push_back(std::string(env) + "/tokenizer/");
  }
  dirs.push_back(kRoot + "../shared/testdata/tokenizer/");
  dirs.push_back(kRoot + "shared/testdata/tokenizer/");
  for (const std::string& d : dirs) {
    if (std::filesystem::exists(d + "MANIFEST.md")) return d;
  }
  return "";
}

const Json& golden() {
  static const Json g = [] {
    auto text = read_text_file(kRoot + "tests/data/tokenizer/pretokenizer_golden.json", 64u << 20);
    KVASIR_CHECK(text.ok());
    auto j = parse_json(*text);
    KVASIR_CHECK(j.ok());
    return std::move(*j);
  }();
  return g;
}

std::vector<std::string> strings(const Json& j) {
  std::vector<std::string> out;
  for (const Json& v : j.as_array()) out.push_back(v.as_string());
  return out;
}

std::vector<std::string> split(const tok::PreTokenizer& pre, const std::string& text) {
  std::vector<tok::PreToken> words{tok::PreToken{text, true}};
  pre.pre_tokenize(&words);
  std::vector<std::string> out;
  for (const tok::PreToken& w : words) out.push_back(w.text);
  return out;
}

std::string show(const std::vector<std::string>& pieces) {
  std::string s;
  for (const std::string& p : pieces) s += "[" + p + "]";
  return s;
}

// Compares our pieces with HF's for every corpus text; reports the first few differences.
void expect_splits(const tok::PreTokenizer& pre, const Json& want, const std::string& label) {
  const Json& corpus = *golden().find("corpus");
  ASSERT_EQ(want.size(), corpus.size()) << label;
  int mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string& text = corpus.as_array()[i].as_string();
    const auto got = split(pre, text);
    const auto expected = strings(want.as_array()[i]);
    if (got != expected && ++mismatches <= 3) {
      ADD_FAILURE() << label << " text " << i << " '" << text << "'\n got: " << show(got) << "\nwant: " << show(expected);
    }
  }
  EXPECT_EQ(mismatches, 0) << label;
}

TEST(PreTokenizerRegexes, EveryRegexCompilesAndIsWrittenInAscii) {
  const auto names = bpe_pre_tokenizer_names();
  ASSERT_GT(names.size(), 40u);
  for (const std::string& name : names) {
    auto regexes = bpe_pre_tokenizer_regexes(name);
    ASSERT_TRUE(regexes.ok()) << name;
    ASSERT_FALSE(regexes->empty()) << name;
    for (const std::string& r : *regexes) {
      auto p = tok::Pattern::regex(r);
      EXPECT_TRUE(p.ok()) << name << ": " << p.status().to_string();
      // Raw non-ASCII characters can be changed by Unicode normalization of the source file
      // (that once turned a range of deepseek-llm's backwards); \x{...} escapes cannot.
      for (unsigned char c : r) {
        if (c >= 0x80) {
          ADD_FAILURE() << name << ": regex holds a raw non-ASCII byte; write \\x{...}: " << r;
          break;
        }
      }
    }
  }
  EXPECT_EQ(bpe_pre_tokenizer_regexes("").value(), bpe_pre_tokenizer_regexes("default").value());
  EXPECT_EQ(bpe_pre_tokenizer_regexes("no-such-pre").status().code(), StatusCode::kUnimplemented);
}

TEST(PreTokenizerRegexes, AnUncompilableRegexIsAnErrorNotACrash) {
  for (const char* bad : {"[\\x{1F5F}-\\x{3CE}]", "[z-a]", "(?<", "\\p{NoSuchProperty}"}) {
    auto p = tok::Pattern::regex(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  }
  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = "no-such-pre";
  spec.tokens = {"a", "b"};
  EXPECT_EQ(tokenizer_from_vocab_spec(spec).status().code(), StatusCode::kUnimplemented);
}

TEST(PreTokenizerGolden, GoldenCoversEveryPreNameWithTodaysRegexes) {
  std::set<std::string> covered;
  for (const Json& family : golden().find("regex_families")->as_array()) {
    const auto regexes = strings(*family.find("regexes"));
    for (const std::string& name : strings(*family.find("names"))) {
      covered.insert(name);
      auto ours = bpe_pre_tokenizer_regexes(name);
      ASSERT_TRUE(ours.ok()) << name;
      EXPECT_EQ(*ours, regexes) << name << ": the regexes changed; rerun scripts/gen_pretokenizer_golden.py";
    }
  }
  for (const std::string& name : bpe_pre_tokenizer_names()) {
    EXPECT_TRUE(covered.count(name)) << name << " has no golden splits; rerun scripts/gen_pretokenizer_golden.py";
  }
}

TEST(PreTokenizerGolden, EveryPreNameSplitsLikeHuggingFace) {
  for (const Json& family : golden().find("regex_families")->as_array()) {
    const std::string name = family.find("names")->as_array()[0].as_string();
    tok::PreTokenizer pre;
    for (const std::string& r : strings(*family.find("regexes"))) {
      auto p = tok::Pattern::regex(r);
      ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
      pre.add_split(std::move(*p), tok::SplitBehavior::kIsolated, false);
    }
    expect_splits(pre, *family.find("splits"), "pre '" + name + "'");
  }
}

TEST(PreTokenizerGolden, ByteLevelAndWhitespaceSplitLikeHuggingFace) {
  for (const Json& b : golden().find("builtin")->as_array()) {
    auto pre = tok::PreTokenizer::from_json(*b.find("pre_tokenizer"));
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    expect_splits(*pre, *b.find("splits"), b.find("pre_tokenizer")->get_string("type"));
  }
}

// The whole GGUF path (vocabulary, pre name -> regexes, byte-level BPE) against a full HF
// tokenizer built from the same vocabulary, on the Unicode corpus. The generator first checked
// that this HF tokenizer reproduces llama.cpp's expected ids for the file.
TEST(PreTokenizerGolden, GgufVocabulariesEncodeTheCorpusLikeHuggingFace) {
  const std::string dir = find_testdata_dir();
  if (dir.empty()) GTEST_SKIP() << "no shared/testdata/tokenizer beside the checkout";
  const Json& corpus = *golden().find("corpus");
  int checked = 0;
  for (const Json& e : golden().find("encode")->as_array()) {
    const std::string path = dir + e.get_string("gguf");
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto tok = tokenizer_from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const Json& ids = *e.find("ids");
    ASSERT_EQ(ids.size(), corpus.size());
    int mismatches = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      const std::string& text = corpus.as_array()[i].as_string();
      std::vector<int32_t> want;
      for (const Json& v : ids.as_array()[i].as_array()) want.push_back(static_cast<int32_t>(v.as_int()));
      const auto got = tok->encode(text, false);
      if (got != want && ++mismatches <= 3) ADD_FAILURE() << e.get_string("gguf") << " text " << i << " '" << text << "'";
    }
    EXPECT_EQ(mismatches, 0) << e.get_string("gguf");
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

}  // namespace
}  // namespace kvasir
