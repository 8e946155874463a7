#include "spec/ngram_proposer.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvasir {
namespace {

std::vector<TokenId> propose(NgramProposer& p, const std::vector<TokenId>& tokens, int k) {
  std::vector<TokenId> drafts{-1};  // propose must clear it
  p.propose(ProposalContext{"r", tokens, 0}, k, &drafts);
  return drafts;
}

TEST(NgramProposer, ProposesWhatFollowedTheLastOccurrenceOfTheSuffix) {
  NgramProposer p(2, 3);
  // Suffix "7 8" occurred at 1..2, followed by 9 10 11.
  EXPECT_EQ(propose(p, {5, 7, 8, 9, 10, 11, 3, 7, 8}, 3), (std::vector<TokenId>{9, 10, 11}));
  EXPECT_EQ(propose(p, {5, 7, 8, 9, 10, 11, 3, 7, 8}, 2), (std::vector<TokenId>{9, 10}));
}

TEST(NgramProposer, LongerMatchWinsOverAMoreRecentShorterOne) {
  NgramProposer p(1, 3);
  // "1 2 3" matches at the start (followed by 40); "3" alone matches later (followed by 50).
  EXPECT_EQ(propose(p, {1, 2, 3, 40, 9, 3, 50, 1, 2, 3}, 1), (std::vector<TokenId>{40}));
}

TEST(NgramProposer, MostRecentOccurrenceWinsAmongEqualLengths) {
  NgramProposer p(2, 2);
  EXPECT_EQ(propose(p, {4, 5, 60, 4, 5, 70, 4, 5}, 1), (std::vector<TokenId>{70}));
}

TEST(NgramProposer, NothingBelowTheMinimumLength) {
  NgramProposer p(3, 4);
  EXPECT_TRUE(propose(p, {1, 2, 9, 8, 1, 2}, 4).empty());  // "1 2" repeats, "9 1 2"... does not
  NgramProposer q(2, 4);
  EXPECT_EQ(propose(q, {1, 2, 9, 8, 1, 2}, 4), (std::vector<TokenId>{9, 8, 1, 2}));
}

TEST(NgramProposer, DraftsStopAtTheEndOfTheHistory) {
  NgramProposer p(1, 2);
  // Periodic text: the match right before the suffix proposes the tokens up to the end.
  EXPECT_EQ(propose(p, {1, 2, 1, 2}, 5), (std::vector<TokenId>{1, 2}));
}

TEST(NgramProposer, ShortOrEmptyHistoriesAndZeroDraftsProposeNothing) {
  NgramProposer p(1, 3);
  EXPECT_TRUE(propose(p, {}, 3).empty());
  EXPECT_TRUE(propose(p, {7}, 3).empty());
  EXPECT_TRUE(propose(p, {7, 7, 7}, 0).empty());
  EXPECT_EQ(propose(p, {7, 7}, 3), (std::vector<TokenId>{7}));
}

TEST(NgramProposer, MakeProposerBuildsNgramAndRefusesOthers) {
  SpeculativeConfig c;
  c.method = "ngram";
  c.num_speculative_tokens = 2;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 2;
  EXPECT_TRUE(make_proposer(c).ok());
  c.method = "eagle3";
  EXPECT_FALSE(make_proposer(c).ok());
}

}  // namespace
}  // namespace kvasir
