// The random dataset with a tokenizer: every prompt is exactly the length it
// was drawn with, counting the prefix and the special tokens the server adds
// (what its usage will report), the lengths spread as --random-range-ratio
// says, and bad options are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "bench_serve/bench_dataset.h"
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_loader.h"

namespace kvasir::bench {
namespace {

std::string shared_testdata() {
  if (const char *env = std::getenv("KVASIR_SHARED_TESTDATA");
      env != nullptr && *env)
    return env;
  return std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata";
}

// SmolLM2's tokenizer.json (adds no BOS to a completion prompt).
const Tokenizer *smollm2() {
  static const auto tok = [] {
    auto t = load_hf_tokenizer(std::string(KVASIR_SOURCE_DIR) +
                               "/models/smollm2-hf");
    return t.ok() ? std::make_unique<Tokenizer>(std::move(*t)) : nullptr;
  }();
  return tok.get();
}

int64_t server_count(const Tokenizer &tok, const std::string &prompt) {
  return static_cast<int64_t>(
      tok.encode(prompt, /*add_special_tokens=*/true).size());
}

TEST(RandomDataset,
     PromptsHaveTheDrawnTokenLengthsAndTheRangeRatioSpreadsThem) {
  const Tokenizer *tok = smollm2();
  if (tok == nullptr)
    GTEST_SKIP() << "models/smollm2-hf not present";
  RandomDatasetOptions o;
  o.input_len = 64;
  o.output_len = 16;
  o.range_ratio = 0.5;
  auto reqs = sample_random_requests(o, 40, 7, tok);
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  ASSERT_EQ(reqs->size(), 40u);
  std::set<int64_t> in_lens, out_lens;
  for (const BenchRequest &r : *reqs) {
    EXPECT_EQ(server_count(*tok, r.prompt), r.prompt_len) << r.prompt;
    EXPECT_GE(r.prompt_len, 32);
    EXPECT_LE(r.prompt_len, 96);
    EXPECT_GE(r.output_len, 8);
    EXPECT_LE(r.output_len, 24);
    in_lens.insert(r.prompt_len);
    out_lens.insert(r.output_len);
  }
  EXPECT_GT(in_lens.size(), 10u);
  EXPECT_GT(out_lens.size(), 5u);
}

TEST(RandomDataset, ExactLengthsAtZeroRatioOverManyLengths) {
  const Tokenizer *tok = smollm2();
  if (tok == nullptr)
    GTEST_SKIP() << "models/smollm2-hf not present";
  for (int64_t len : {1, 2, 7, 128, 1000}) {
    RandomDatasetOptions o;
    o.input_len = len;
    o.output_len = 3;
    auto reqs = sample_random_requests(o, 5, static_cast<uint64_t>(len), tok);
    ASSERT_TRUE(reqs.ok());
    for (const BenchRequest &r : *reqs) {
      EXPECT_EQ(r.prompt_len, len);
      EXPECT_EQ(server_count(*tok, r.prompt), len) << r.prompt;
      EXPECT_EQ(r.output_len, 3);
    }
  }
}

TEST(RandomDataset, ThePrefixIsSharedAndCountsInTheLength) {
  const Tokenizer *tok = smollm2();
  if (tok == nullptr)
    GTEST_SKIP() << "models/smollm2-hf not present";
  RandomDatasetOptions o;
  o.input_len = 30;
  o.prefix_len = 50;
  auto reqs = sample_random_requests(o, 8, 3, tok);
  ASSERT_TRUE(reqs.ok());
  // The prompts share their first ~50 tokens of text, then differ.
  const std::string &first = (*reqs)[0].prompt;
  size_t common = first.size();
  for (const BenchRequest &r : *reqs) {
    EXPECT_EQ(r.prompt_len, 80);
    EXPECT_EQ(server_count(*tok, r.prompt), 80) << r.prompt;
    common = std::min(
        common,
        static_cast<size_t>(std::mismatch(first.begin(), first.end(),
                                          r.prompt.begin(), r.prompt.end())
                                .first -
                            first.begin()));
  }
  EXPECT_GE(
      static_cast<int64_t>(tok->encode(first.substr(0, common), false).size()),
      49);
  EXPECT_LT(common, first.size());
}

TEST(RandomDataset, SpecialTokensTheServerAddsCountInTheLength) {
  const std::string path =
      shared_testdata() + "/tokenizer/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " not present";
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok());
  auto tok = tokenizer_from_gguf(**gguf);
  ASSERT_TRUE(tok.ok());
  ASSERT_FALSE(tok->special_prefix().empty()) << "this vocabulary adds a BOS";
  RandomDatasetOptions o;
  o.input_len = 40;
  auto reqs = sample_random_requests(o, 6, 1, &*tok);
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  for (const BenchRequest &r : *reqs) {
    EXPECT_EQ(r.prompt_len, 40);
    EXPECT_EQ(server_count(*tok, r.prompt), 40) << r.prompt;
  }
}

TEST(RandomDataset, SameSeedSamePromptsAndWordCountsWithoutATokenizer) {
  RandomDatasetOptions o;
  o.input_len = 20;
  o.range_ratio = 0.25;
  auto a = sample_random_requests(o, 4, 11, nullptr),
       b = sample_random_requests(o, 4, 11, nullptr),
       c = sample_random_requests(o, 4, 12, nullptr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*a)[i].prompt, (*b)[i].prompt);
    const std::string &p = (*a)[i].prompt;
    EXPECT_EQ(static_cast<int64_t>(std::count(p.begin(), p.end(), ' ')) + 1,
              (*a)[i].prompt_len);
  }
  EXPECT_NE((*a)[0].prompt, (*c)[0].prompt);
}

TEST(RandomDataset, BadOptionsAreRefused) {
  RandomDatasetOptions o;
  o.range_ratio = 1;
  EXPECT_FALSE(sample_random_requests(o, 1, 0, nullptr).ok());
  o.range_ratio = -0.1;
  EXPECT_FALSE(sample_random_requests(o, 1, 0, nullptr).ok());
  o = RandomDatasetOptions();
  o.input_len = 0;
  EXPECT_FALSE(sample_random_requests(o, 1, 0, nullptr).ok());
  o = RandomDatasetOptions();
  o.prefix_len = -1;
  EXPECT_FALSE(sample_random_requests(o, 1, 0, nullptr).ok());
}

} // namespace
} // namespace kvasir::bench
