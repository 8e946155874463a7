// Golden test against HF `tokenizers`: tests/data/tokenizer/golden_<name>.json (written by
// scripts/gen_tokenizer_golden.py) holds a Unicode-heavy corpus with the ids HF produced with and
// without special tokens and HF's decode of them. Both of our loaders must reproduce them: the
// tokenizer.json one (models/<name>-hf/) and the GGUF-vocabulary one (the model's .gguf). A
// loader whose files are absent is skipped; at least one must run.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_loader.h"

namespace kvasir {
namespace {

const std::string kRoot = std::string(KVASIR_SOURCE_DIR) + "/";

std::vector<int32_t> to_ids(const Json& j) {
  std::vector<int32_t> out;
  for (const Json& v : j.as_array()) out.push_back(static_cast<int32_t>(v.as_int()));
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

void check_golden(const Tokenizer& tok, const Json& golden, const std::string& label) {
  const Json* cases = golden.find("cases");
  ASSERT_TRUE(cases != nullptr && cases->is_array());
  int mismatches = 0;
  for (const Json& c : cases->as_array()) {
    const std::string& text = c.find("text")->as_string();
    const auto ids = to_ids(*c.find("ids"));
    const auto ids_special = to_ids(*c.find("ids_special"));
    const std::string snippet = text.substr(0, 60);
    auto got = tok.encode(text, false);
    auto got_special = tok.encode(text, true);
    EXPECT_EQ(got, ids) << label << " '" << snippet << "'\n got:" << show(got) << "\nwant:" << show(ids);
    EXPECT_EQ(got_special, ids_special) << label << " (special) '" << snippet << "'";
    EXPECT_EQ(tok.decode(ids_special, false), c.find("decoded")->as_string()) << label << " '" << snippet << "'";
    EXPECT_EQ(tok.decode(ids_special, true), c.find("decoded_skip")->as_string()) << label << " '" << snippet << "'";
    mismatches += got != ids || got_special != ids_special;
  }
  EXPECT_EQ(mismatches, 0) << label;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, BothLoadersMatchHuggingFace) {
  const std::string name = GetParam();
  auto text = read_text_file(kRoot + "tests/data/tokenizer/golden_" + name + ".json");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  auto golden = parse_json(*text);
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  int loaders = 0;

  const std::string hf_dir = kRoot + golden->get_string("hf_dir");
  if (std::filesystem::exists(hf_dir + "/tokenizer.json")) {
    auto tok = load_hf_tokenizer(hf_dir);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    check_golden(*tok, *golden, name + " tokenizer.json");
    ++loaders;
  }
  const std::string gguf = kRoot + golden->get_string("gguf");
  if (std::filesystem::exists(gguf)) {
    auto file = GgufFile::open(gguf);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto tok = tokenizer_from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    check_golden(*tok, *golden, name + " gguf");
    ++loaders;
  }
  if (loaders == 0) GTEST_SKIP() << "neither " << hf_dir << " nor " << gguf << " exists";
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest, ::testing::Values("smollm2", "gemma3"));

}  // namespace
}  // namespace kvasir
