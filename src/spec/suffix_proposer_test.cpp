// The `suffix` method behind the Proposer interface: its --speculative-config keys (vLLM's
// suffix_decoding_*), and the adapter feeding SuffixDecoding from the runner's proposal calls (a
// request's prompt on first sight, accepted tokens after, its output into the global tree at finish).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "spec/proposer.h"
#include "spec/speculative_config.h"
#include "spec/suffix_proposer.h"

namespace kvasir {
namespace {

std::string error_of(const std::string& json) {
  auto c = parse_speculative_config(json);
  return c.ok() ? std::string() : c.status().message();
}

TEST(SuffixConfig, ReadsVllmKeysWithVllmDefaults) {
  auto d = parse_speculative_config(R"({"method": "suffix"})");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->suffix.max_tree_depth, 24);
  EXPECT_EQ(d->num_speculative_tokens, 24);  // vLLM: as many drafts as the tree is deep
  EXPECT_EQ(d->suffix.num_speculative_tokens, 24);
  auto c = parse_speculative_config(
      R"({"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 32,
          "suffix_decoding_max_cached_requests": 5, "suffix_decoding_max_spec_factor": 2,
          "suffix_decoding_min_token_prob": 0.25})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->num_speculative_tokens, 8);
  EXPECT_EQ(c->suffix.num_speculative_tokens, 8);
  EXPECT_EQ(c->suffix.max_tree_depth, 32);
  EXPECT_EQ(c->suffix.max_cached_requests, 5);
  EXPECT_DOUBLE_EQ(c->suffix.max_spec_factor, 2.0);
  EXPECT_DOUBLE_EQ(c->suffix.min_token_prob, 0.25);
}

TEST(SuffixConfig, BadOrMisplacedKeysAreNamed) {
  EXPECT_NE(error_of(R"({"method": "suffix", "suffix_decoding_max_tree_depth": 0})").find("max_tree_depth"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "suffix", "suffix_decoding_max_tree_depth": 2.5})").find("max_tree_depth"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "suffix", "suffix_decoding_max_cached_requests": -1})").find("max_cached_requests"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "suffix", "suffix_decoding_min_token_prob": 1.5})").find("min_token_prob"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "suffix", "suffix_decoding_max_spec_factor": "x"})").find("must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "suffix", "prompt_lookup_min": 2})").find("belong to the \"ngram\" method"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 3, "suffix_decoding_max_tree_depth": 8})")
                .find("belongs to the \"suffix\" method"),
            std::string::npos);
}

struct History {
  std::vector<TokenId> tokens;
  int num_prompt = 0;
  ProposalContext ctx(const char* id) const { return {id, tokens, num_prompt}; }
};

TEST(SuffixProposer, ProposesFromTheRequestsOwnHistoryAsItGrows) {
  auto cfg = parse_speculative_config(R"({"method": "suffix", "num_speculative_tokens": 4})");
  ASSERT_TRUE(cfg.ok());
  auto made = make_proposer(*cfg);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Proposer& p = **made;
  // The prompt holds "5 6 7 8 9" once; the output so far ends in "5 6": the tree predicts 7 8 9.
  History h{{1, 5, 6, 7, 8, 9, 2, 3}, 8};
  std::vector<TokenId> drafts{42};
  p.propose(h.ctx("a"), 4, &drafts);
  EXPECT_TRUE(drafts.empty() || drafts.front() != 42);  // cleared first
  h.tokens.insert(h.tokens.end(), {5, 6});
  p.propose(h.ctx("a"), 4, &drafts);
  ASSERT_GE(drafts.size(), 2u);
  EXPECT_EQ(drafts[0], 7);
  EXPECT_EQ(drafts[1], 8);
  // Fewer allowed: fewer proposed.
  p.propose(h.ctx("a"), 1, &drafts);
  EXPECT_EQ(drafts, std::vector<TokenId>{7});
  p.propose(h.ctx("a"), 0, &drafts);
  EXPECT_TRUE(drafts.empty());
}

TEST(SuffixProposer, AFinishedRequestsOutputHelpsTheNextOne) {
  SuffixDecodingConfig cfg;
  cfg.num_speculative_tokens = 6;
  SuffixProposer p(cfg);
  // Request a generates "20 21 22 23 24 25" after its prompt.
  History a{{100, 101, 20, 21, 22, 23, 24, 25}, 2};
  std::vector<TokenId> drafts;
  p.propose(a.ctx("a"), 6, &drafts);
  EXPECT_EQ(p.trees().num_active_requests(), 1);
  p.finish_request("a");
  EXPECT_EQ(p.trees().num_active_requests(), 0);
  EXPECT_EQ(p.trees().num_cached_requests(), 1);
  // Request b, a different prompt, has just produced "20 21 22": only the global tree knows more.
  History b{{300, 301, 302, 20, 21, 22}, 3};
  p.propose(b.ctx("b"), 6, &drafts);
  ASSERT_FALSE(drafts.empty());
  EXPECT_EQ(drafts[0], 23);
  p.finish_request("b");
  p.finish_request("never-seen");  // harmless
  EXPECT_EQ(p.trees().num_active_requests(), 0);
}

TEST(SuffixProposer, ABadTokenIsNotProposedForAndHarmsNothing) {
  SuffixDecodingConfig cfg;
  SuffixProposer p(cfg);
  History bad{{1, -5, 3}, 3};
  std::vector<TokenId> drafts{9};
  p.propose(bad.ctx("bad"), 4, &drafts);
  EXPECT_TRUE(drafts.empty());
  History good{{4, 5, 6, 4, 5}, 5};
  p.propose(good.ctx("good"), 4, &drafts);
  ASSERT_FALSE(drafts.empty());
  EXPECT_EQ(drafts[0], 6);
}

}  // namespace
}  // namespace kvasir
