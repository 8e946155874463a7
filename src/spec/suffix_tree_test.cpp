#include "spec/suffix_tree.h"

#include <gtest/gtest.h>

#include <random>

#include "spec/suffix_reference_test_util.h"

namespace kvasir {
namespace {

using testing::Sequences;

SuffixSpeculateParams params(int max_tokens, double factor, double min_prob, double offset = 0.0) {
  SuffixSpeculateParams p;
  p.max_tokens = max_tokens;
  p.max_spec_factor = factor;
  p.max_spec_offset = offset;
  p.min_token_prob = min_prob;
  return p;
}

TEST(SuffixTreeTest, CountsEveryRunUpToMaxDepth) {
  SuffixTree tree(3);
  tree.insert_sequence(std::vector<TokenId>{1, 2, 1, 2, 1});
  tree.check_invariants();
  EXPECT_EQ(tree.num_tokens(), 5);
  EXPECT_EQ(tree.count(std::vector<TokenId>{1}), 3);
  EXPECT_EQ(tree.count(std::vector<TokenId>{1, 2}), 2);
  EXPECT_EQ(tree.count(std::vector<TokenId>{2, 1}), 2);
  EXPECT_EQ(tree.count(std::vector<TokenId>{1, 2, 1}), 2);
  EXPECT_EQ(tree.count(std::vector<TokenId>{2, 2}), 0);
  // Longer than max_depth is never counted, even though it occurs.
  EXPECT_EQ(tree.count(std::vector<TokenId>{1, 2, 1, 2}), 0);
  // Nodes: 1, 2, 12, 21, 121, 212.
  EXPECT_EQ(tree.num_nodes(), 6);
}

TEST(SuffixTreeTest, RepeatedPhraseProposesItsContinuation) {
  // Period 5, ending in the middle of the phrase: the tail "1 2" is followed by "3 4 5 1 2" each
  // time but the last. Matches of 3..7 tokens occur 3 times with 2 continuing (p = 2/3 for all
  // 5 tokens, score 10/3); longer matches occur only twice (p = 1/2); the longest tie wins.
  std::vector<TokenId> seq;
  for (int r = 0; r < 3; ++r) seq.insert(seq.end(), {1, 2, 3, 4, 5});
  seq.insert(seq.end(), {1, 2});
  SuffixTree tree(24);
  auto cursor = tree.new_cursor();
  tree.append(cursor, seq);
  tree.check_invariants();
  SuffixDraft d = tree.speculate(seq, params(5, 1.0, 0.1));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{3, 4, 5, 1, 2}));
  EXPECT_EQ(d.match_len, 7);
  EXPECT_DOUBLE_EQ(d.score, 10.0 / 3.0);
  // max_spec_factor bounds the draft by the match: with factor 0.5 a 7-token match may draft 3,
  // but a 10-token match (p = 1/2) may draft 5 (score 2.5) and beats 3 x 2/3.
  d = tree.speculate(seq, params(5, 0.5, 0.1));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{3, 4, 5, 1, 2}));
  EXPECT_EQ(d.match_len, 12);
  EXPECT_DOUBLE_EQ(d.score, 2.5);
}

TEST(SuffixTreeTest, CompetingContinuationsFollowTheMoreFrequent) {
  SuffixTree tree(8);
  for (int i = 0; i < 3; ++i) tree.insert_sequence(std::vector<TokenId>{7, 8, 1});
  tree.insert_sequence(std::vector<TokenId>{7, 8, 2});
  const std::vector<TokenId> ctx = {7, 8};
  SuffixDraft d = tree.speculate(ctx, params(4, 10.0, 0.0));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{1}));
  EXPECT_DOUBLE_EQ(d.score, 0.75);
  EXPECT_EQ(d.match_len, 2);
  // Equal counts: the smaller token id, so the choice never depends on insertion order.
  tree.insert_sequence(std::vector<TokenId>{7, 8, 2});
  tree.insert_sequence(std::vector<TokenId>{7, 8, 2});
  EXPECT_EQ(tree.speculate(ctx, params(4, 10.0, 0.0)).token_ids, (std::vector<TokenId>{1}));
  tree.insert_sequence(std::vector<TokenId>{7, 8, 2});
  d = tree.speculate(ctx, params(4, 10.0, 0.0));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{2}));
  EXPECT_DOUBLE_EQ(d.score, 4.0 / 7.0);
  tree.check_invariants();
}

TEST(SuffixTreeTest, MinTokenProbCutsTheDraftWhereTheProductFallsBelowIt) {
  // After "1 2": 3 with 2/3; after "1 2 3": 4 or 5 with 1/2 each, so p(3 4) = 1/3.
  SuffixTree tree(8);
  tree.insert_sequence(std::vector<TokenId>{1, 2, 3, 4});
  tree.insert_sequence(std::vector<TokenId>{1, 2, 3, 5});
  tree.insert_sequence(std::vector<TokenId>{1, 2, 7});
  const std::vector<TokenId> ctx = {1, 2};
  SuffixDraft d = tree.speculate(ctx, params(4, 10.0, 0.3));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{3, 4}));
  EXPECT_DOUBLE_EQ(d.score, 2.0 / 3.0 + 1.0 / 3.0);
  d = tree.speculate(ctx, params(4, 10.0, 0.5));
  EXPECT_EQ(d.token_ids, (std::vector<TokenId>{3}));
  EXPECT_DOUBLE_EQ(d.score, 2.0 / 3.0);
  d = tree.speculate(ctx, params(4, 10.0, 0.7));
  EXPECT_TRUE(d.token_ids.empty());
  EXPECT_EQ(d.score, 0.0);
  EXPECT_EQ(d.match_len, 2);  // it matched, it just was not sure enough
  // max_tokens 0 proposes nothing whatever the counts.
  EXPECT_TRUE(tree.speculate(ctx, params(0, 10.0, 0.0)).token_ids.empty());
}

TEST(SuffixTreeTest, NoMatchGivesAnEmptyDraft) {
  SuffixTree tree(4);
  EXPECT_EQ(tree.speculate(std::vector<TokenId>{1, 2}, params(4, 1.0, 0.1)).match_len, 0);
  tree.insert_sequence(std::vector<TokenId>{1, 2, 3});
  SuffixDraft d = tree.speculate(std::vector<TokenId>{9}, params(4, 1.0, 0.1));
  EXPECT_TRUE(d.token_ids.empty());
  EXPECT_EQ(d.match_len, 0);
  EXPECT_TRUE(tree.speculate(std::vector<TokenId>{}, params(4, 1.0, 0.1)).token_ids.empty());
}

TEST(SuffixTreeTest, RemovingEverySequenceFreesEveryNodeAndReusesThem) {
  SuffixTree tree(5);
  const std::vector<TokenId> a = {1, 2, 3, 1, 2, 4}, b = {2, 3, 1, 9};
  tree.insert_sequence(a);
  tree.insert_sequence(b);
  const int64_t both = tree.num_nodes();
  tree.remove_sequence(a);
  tree.check_invariants();
  SuffixTree only_b(5);
  only_b.insert_sequence(b);
  EXPECT_EQ(tree.num_nodes(), only_b.num_nodes());
  EXPECT_EQ(tree.count(std::vector<TokenId>{2, 3, 1}), 1);
  EXPECT_EQ(tree.count(std::vector<TokenId>{1, 2}), 0);
  tree.remove_sequence(b);
  tree.check_invariants();
  EXPECT_EQ(tree.num_nodes(), 0);
  EXPECT_EQ(tree.num_tokens(), 0);
  tree.insert_sequence(a);
  tree.insert_sequence(b);
  tree.check_invariants();
  EXPECT_EQ(tree.num_nodes(), both);
}

TEST(SuffixTreeTest, NodesStayWithinMaxDepthPerToken) {
  // Distinct tokens are the worst case: every run is new.
  SuffixTree tree(4);
  auto cursor = tree.new_cursor();
  std::vector<TokenId> seq;
  for (TokenId t = 0; t < 1000; ++t) seq.push_back(t);
  tree.append(cursor, seq);
  tree.check_invariants();
  EXPECT_EQ(tree.num_nodes(), 1000 * 4 - (1 + 2 + 3));  // the first tokens start fewer runs
  EXPECT_LE(tree.num_nodes(), tree.num_tokens() * tree.max_depth());
}

TEST(SuffixTreeDeathTest, CursorUsedAfterARemovalAborts) {
  SuffixTree tree(3);
  auto cursor = tree.new_cursor();
  tree.append(cursor, std::vector<TokenId>{1, 2});
  tree.insert_sequence(std::vector<TokenId>{5});
  tree.remove_sequence(std::vector<TokenId>{5});
  EXPECT_DEATH(tree.append(cursor, 3), "cursor used after a removal");
}

// Random small-alphabet sequences (so runs repeat often and ties are common), inserted, appended
// token by token and removed in random order; every answer must equal a scan of what is held.
TEST(SuffixTreeTest, MatchesANaiveScanOnRandomSequences) {
  std::mt19937 rng(20261202);
  int num_drafts = 0, num_removals = 0;  // so the comparison is known to cover real work
  for (int trial = 0; trial < 60; ++trial) {
    const int depth = 1 + static_cast<int>(rng() % 12);
    const int alphabet = 2 + static_cast<int>(rng() % 3);
    auto token = [&] { return static_cast<TokenId>(rng() % static_cast<unsigned>(alphabet)); };
    SuffixTree tree(depth);
    Sequences held;
    // One sequence grows through a cursor; it is never removed (a removal would end the cursor),
    // so it lives in its own tree.
    SuffixTree growing(depth);
    auto cursor = growing.new_cursor();
    Sequences grown(1);
    for (int op = 0; op < 40; ++op) {
      const unsigned kind = rng() % 4;
      if (kind == 0 && !held.empty()) {
        size_t victim = rng() % held.size();
        tree.remove_sequence(held[victim]);
        num_removals++;
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
      } else if (kind == 1) {
        std::vector<TokenId> s(rng() % 30);
        for (auto& t : s) t = token();
        tree.insert_sequence(s);
        held.push_back(s);
      } else {
        TokenId t = token();
        growing.append(cursor, t);
        grown[0].push_back(t);
      }
      tree.check_invariants();
      growing.check_invariants();
      for (int q = 0; q < 4; ++q) {
        std::vector<TokenId> ctx(rng() % static_cast<unsigned>(depth + 4));
        for (auto& t : ctx) t = token();
        if (q == 0 && !grown[0].empty()) ctx = grown[0];  // the growing sequence's own tail
        SuffixSpeculateParams p = params(static_cast<int>(rng() % 6), 0.25 * (rng() % 9), 0.1 * (rng() % 8),
                                         static_cast<double>(rng() % 3));
        for (auto [t, seqs] : {std::pair{&tree, &held}, std::pair{&growing, &grown}}) {
          ASSERT_EQ(t->longest_match_len(ctx), testing::naive_longest_match(*seqs, ctx, depth));
          std::span<const TokenId> pat(ctx);
          pat = pat.last(std::min(pat.size(), static_cast<size_t>(depth)));
          ASSERT_EQ(t->count(pat), testing::naive_count(*seqs, pat));
          SuffixDraft want = testing::naive_speculate(*seqs, ctx, depth, p);
          SuffixDraft got = t->speculate(ctx, p);
          ASSERT_EQ(got.token_ids, want.token_ids) << "trial " << trial << " op " << op;
          ASSERT_EQ(got.match_len, want.match_len);
          ASSERT_DOUBLE_EQ(got.score, want.score);
          num_drafts += !got.token_ids.empty();
        }
      }
    }
  }
  EXPECT_GT(num_drafts, 1000);
  EXPECT_GT(num_removals, 200);
}

}  // namespace
}  // namespace kvasir
