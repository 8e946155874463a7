#include "spec/suffix_decoding.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>

#include "spec/suffix_reference_test_util.h"

namespace kvasir {
namespace {

using Tokens = std::vector<TokenId>;

SuffixDecodingConfig config(int num_speculative_tokens, int max_cached_requests, int max_tree_depth = 24) {
  SuffixDecodingConfig c;
  c.num_speculative_tokens = num_speculative_tokens;
  c.max_cached_requests = max_cached_requests;
  c.max_tree_depth = max_tree_depth;
  return c;
}

SuffixDraft propose_ok(const SuffixDecoding& sd, RequestIdx r, int max_tokens) {
  StatusOr<SuffixDraft> d = sd.propose(r, max_tokens);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? *d : SuffixDraft{};
}

TEST(SuffixDecodingTest, RepeatedPhraseInTheRequestIsProposed) {
  SuffixDecoding sd(config(5, 10));
  ASSERT_TRUE(sd.start_request(1, Tokens{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(sd.add_output(1, Tokens{1, 2, 3, 4, 5, 1, 2}).ok());
  sd.check_invariants();
  SuffixDraft d = propose_ok(sd, 1, 5);
  EXPECT_EQ(d.token_ids, (Tokens{3, 4, 5, 1, 2}));
  EXPECT_DOUBLE_EQ(d.score, 10.0 / 3.0);
  // The engine may ask for fewer (load-adaptive) but never gets more than num_speculative_tokens.
  EXPECT_EQ(propose_ok(sd, 1, 2).token_ids, (Tokens{3, 4}));
  EXPECT_EQ(propose_ok(sd, 1, 50).token_ids.size(), 5u);
  EXPECT_TRUE(propose_ok(sd, 1, 0).token_ids.empty());
  // The step loop's form replaces what the buffer held and keeps its capacity.
  SuffixDraft reused;
  reused.token_ids = {9, 9, 9, 9, 9, 9, 9};
  const TokenId* storage = reused.token_ids.data();
  ASSERT_TRUE(sd.propose(1, 5, &reused).ok());
  EXPECT_EQ(reused.token_ids, (Tokens{3, 4, 5, 1, 2}));
  EXPECT_DOUBLE_EQ(reused.score, 10.0 / 3.0);
  EXPECT_EQ(reused.token_ids.data(), storage);
  ASSERT_TRUE(sd.propose(1, 2, &reused).ok());
  EXPECT_EQ(reused.token_ids, (Tokens{3, 4}));
}

TEST(SuffixDecodingTest, TokenByTokenOutputBuildsTheSameTreeAsOnePrompt) {
  // add_output extends the request's tree where it left off: the same tokens given one at a time
  // or all at once make the same tree and the same proposals.
  std::mt19937 rng(3);
  Tokens all(3000);
  for (auto& t : all) t = static_cast<TokenId>(rng() % 20);
  SuffixDecoding sd(config(5, 0, 12));
  ASSERT_TRUE(sd.start_request(1, all).ok());
  ASSERT_TRUE(sd.start_request(2, Tokens(all.begin(), all.begin() + 100)).ok());
  for (size_t i = 100; i < all.size(); ++i) ASSERT_TRUE(sd.add_output(2, Tokens{all[i]}).ok());
  sd.check_invariants();
  EXPECT_EQ(sd.num_request_tree_nodes(1), sd.num_request_tree_nodes(2));
  for (TokenId t = 0; t < 20; ++t) {
    ASSERT_TRUE(sd.add_output(1, Tokens{t}).ok());
    ASSERT_TRUE(sd.add_output(2, Tokens{t}).ok());
    SuffixDraft a = propose_ok(sd, 1, 5), b = propose_ok(sd, 2, 5);
    EXPECT_EQ(a.token_ids, b.token_ids);
    EXPECT_EQ(a.match_len, b.match_len);
  }
}

TEST(SuffixDecodingTest, FinishedRequestsOutputServesTheNextRequest) {
  SuffixDecoding sd(config(5, 10));
  ASSERT_TRUE(sd.start_request(1, Tokens{100, 101}).ok());
  ASSERT_TRUE(sd.add_output(1, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).ok());
  ASSERT_TRUE(sd.stop_request(1).ok());
  EXPECT_EQ(sd.num_cached_requests(), 1);
  // Request 2's own history has "3" only at its end (no continuation); the cached output continues
  // "1 2 3" with certainty, and a 3-token match may draft 3 tokens (max_spec_factor 1).
  ASSERT_TRUE(sd.start_request(2, Tokens{50, 51, 1, 2, 3}).ok());
  SuffixDraft d = propose_ok(sd, 2, 5);
  EXPECT_EQ(d.token_ids, (Tokens{4, 5, 6}));
  EXPECT_EQ(d.match_len, 3);
  EXPECT_DOUBLE_EQ(d.score, 3.0);
  sd.check_invariants();
}

TEST(SuffixDecodingTest, PromptsAreNotCachedGloballyOnlyOutputs) {
  SuffixDecoding sd(config(5, 10));
  ASSERT_TRUE(sd.start_request(1, Tokens{1, 2, 3, 4, 5, 6}).ok());
  ASSERT_TRUE(sd.add_output(1, Tokens{9}).ok());
  ASSERT_TRUE(sd.stop_request(1).ok());
  ASSERT_TRUE(sd.start_request(2, Tokens{1, 2, 3}).ok());
  EXPECT_TRUE(propose_ok(sd, 2, 5).token_ids.empty());
}

TEST(SuffixDecodingTest, TheOldestCachedOutputIsEvictedPastTheLimit) {
  SuffixDecoding sd(config(5, 2));
  auto finish = [&](RequestIdx r, const Tokens& output) {
    ASSERT_TRUE(sd.start_request(r, Tokens{}).ok());
    ASSERT_TRUE(sd.add_output(r, output).ok());
    ASSERT_TRUE(sd.stop_request(r).ok());
    sd.check_invariants();
  };
  finish(1, Tokens{1, 2, 3, 4});
  finish(2, Tokens{1, 2, 5, 6});
  ASSERT_TRUE(sd.start_request(9, Tokens{1, 2}).ok());
  // 3 and 5 follow "1 2" once each: the smaller token.
  EXPECT_EQ(propose_ok(sd, 9, 1).token_ids, (Tokens{3}));
  finish(3, Tokens{1, 2, 7, 8});
  EXPECT_EQ(sd.num_cached_requests(), 2);
  EXPECT_EQ(propose_ok(sd, 9, 1).token_ids, (Tokens{5}));  // request 1's "3" is gone
  // The global tree holds exactly what a tree of the two newest outputs holds.
  SuffixTree newest(24);
  newest.insert_sequence(Tokens{1, 2, 5, 6});
  newest.insert_sequence(Tokens{1, 2, 7, 8});
  EXPECT_EQ(sd.num_global_tree_nodes(), newest.num_nodes());
}

TEST(SuffixDecodingTest, TheCachedTokenBoundEvictsTheOldestAndSkipsLongerOutputs) {
  SuffixDecodingConfig c = config(5, 100);
  c.max_cached_tokens = 10;
  SuffixDecoding sd(c);
  auto finish = [&](RequestIdx r, const Tokens& output) {
    ASSERT_TRUE(sd.start_request(r, Tokens{}).ok());
    ASSERT_TRUE(sd.add_output(r, output).ok());
    ASSERT_TRUE(sd.stop_request(r).ok());
    sd.check_invariants();
  };
  finish(1, Tokens{1, 2, 3, 4});
  finish(2, Tokens{5, 6, 7, 8});
  EXPECT_EQ(sd.num_cached_tokens(), 8);
  finish(3, Tokens{9, 10, 11});  // 11 tokens: request 1 goes
  EXPECT_EQ(sd.num_cached_requests(), 2);
  EXPECT_EQ(sd.num_cached_tokens(), 7);
  finish(4, Tokens(11, 42));  // longer than the whole bound: not cached, nothing evicted
  EXPECT_EQ(sd.num_cached_requests(), 2);
  EXPECT_EQ(sd.num_cached_tokens(), 7);
  ASSERT_TRUE(sd.start_request(9, Tokens{5, 6}).ok());
  EXPECT_EQ(propose_ok(sd, 9, 2).token_ids, (Tokens{7, 8}));
  ASSERT_TRUE(sd.start_request(10, Tokens{1, 2}).ok());
  EXPECT_TRUE(propose_ok(sd, 10, 2).token_ids.empty());
}

TEST(SuffixDecodingTest, MemoryStaysBoundedOverManyRequests) {
  constexpr int kDepth = 8;
  SuffixDecoding sd(config(5, 3, kDepth));
  std::mt19937 rng(7);
  std::deque<Tokens> last_three;
  for (RequestIdx r = 0; r < 200; ++r) {
    Tokens prompt(50), output(40);
    for (auto& t : prompt) t = static_cast<TokenId>(rng() % 1000);
    for (auto& t : output) t = static_cast<TokenId>(rng() % 1000);
    ASSERT_TRUE(sd.start_request(r, prompt).ok());
    for (TokenId t : output) ASSERT_TRUE(sd.add_output(r, Tokens{t}).ok());
    // Per request: at most max_tree_depth nodes per token held.
    EXPECT_LE(sd.num_request_tree_nodes(r), static_cast<int64_t>(prompt.size() + output.size()) * kDepth);
    ASSERT_TRUE(sd.stop_request(r).ok());
    last_three.push_back(output);
    if (last_three.size() > 3) last_three.pop_front();
  }
  sd.check_invariants();
  EXPECT_EQ(sd.num_active_requests(), 0);
  EXPECT_EQ(sd.num_cached_requests(), 3);
  SuffixTree expected(kDepth);
  for (const auto& o : last_three) expected.insert_sequence(o);
  EXPECT_EQ(sd.num_global_tree_nodes(), expected.num_nodes());
}

TEST(SuffixDecodingTest, ZeroCachedRequestsTurnsTheGlobalTreeOff) {
  SuffixDecoding sd(config(5, 0));
  ASSERT_TRUE(sd.start_request(1, Tokens{}).ok());
  ASSERT_TRUE(sd.add_output(1, Tokens{1, 2, 3, 4}).ok());
  ASSERT_TRUE(sd.stop_request(1).ok());
  EXPECT_EQ(sd.num_cached_requests(), 0);
  EXPECT_EQ(sd.num_global_tree_nodes(), 0);
  ASSERT_TRUE(sd.start_request(2, Tokens{1, 2}).ok());
  EXPECT_TRUE(propose_ok(sd, 2, 5).token_ids.empty());
}

TEST(SuffixDecodingTest, BadCallsAreRefusedAndChangeNothing) {
  SuffixDecoding sd(config(5, 10));
  ASSERT_TRUE(sd.start_request(1, Tokens{1, 2, 3, 1, 2}).ok());
  const SuffixDraft before = propose_ok(sd, 1, 5);
  const int64_t nodes = sd.num_request_tree_nodes(1);

  EXPECT_EQ(sd.start_request(1, Tokens{4}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sd.start_request(2, Tokens{4, -1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sd.num_active_requests(), 1);
  EXPECT_EQ(sd.add_output(7, Tokens{1}).code(), StatusCode::kNotFound);
  EXPECT_EQ(sd.add_output(1, Tokens{3, -5}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sd.propose(7, 5).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sd.propose(1, -1).status().code(), StatusCode::kInvalidArgument);
  SuffixDraft kept;
  kept.token_ids = {77};
  EXPECT_EQ(sd.propose(1, -1, &kept).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sd.propose(7, 5, &kept).code(), StatusCode::kNotFound);
  EXPECT_EQ(kept.token_ids, (Tokens{77}));
  EXPECT_EQ(sd.stop_request(7).code(), StatusCode::kNotFound);

  EXPECT_EQ(sd.num_request_tree_nodes(1), nodes);
  SuffixDraft after = propose_ok(sd, 1, 5);
  EXPECT_EQ(after.token_ids, before.token_ids);
  EXPECT_EQ(after.token_ids, (Tokens{3, 1}));  // "1 2" -> "3 1" half the time
  ASSERT_TRUE(sd.stop_request(1).ok());
  EXPECT_EQ(sd.stop_request(1).code(), StatusCode::kNotFound);
  sd.check_invariants();
}

TEST(SuffixDecodingTest, ConfigValidationNamesTheBadField) {
  EXPECT_TRUE(SuffixDecodingConfig{}.validate().ok());
  auto message_of = [](SuffixDecodingConfig c) {
    Status s = c.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  SuffixDecodingConfig c;
  c.num_speculative_tokens = 0;
  EXPECT_NE(message_of(c).find("num_speculative_tokens"), std::string::npos);
  c = {};
  c.num_speculative_tokens = kMaxSuffixSpeculativeTokens + 1;
  EXPECT_NE(message_of(c).find("num_speculative_tokens"), std::string::npos);
  c = {};
  c.max_tree_depth = 0;
  EXPECT_NE(message_of(c).find("max_tree_depth"), std::string::npos);
  c.max_tree_depth = kMaxSuffixTreeDepth + 1;
  EXPECT_NE(message_of(c).find("max_tree_depth"), std::string::npos);
  c = {};
  c.max_cached_requests = -1;
  EXPECT_NE(message_of(c).find("max_cached_requests"), std::string::npos);
  c = {};
  c.max_cached_tokens = 0;
  EXPECT_NE(message_of(c).find("max_cached_tokens"), std::string::npos);
  c = {};
  c.max_spec_factor = -0.5;
  EXPECT_NE(message_of(c).find("max_spec_factor"), std::string::npos);
  c.max_spec_factor = std::nan("");
  EXPECT_NE(message_of(c).find("max_spec_factor"), std::string::npos);
  c = {};
  c.max_spec_offset = INFINITY;
  EXPECT_NE(message_of(c).find("max_spec_offset"), std::string::npos);
  c = {};
  c.min_token_prob = 1.5;
  EXPECT_NE(message_of(c).find("min_token_prob"), std::string::npos);
  c.min_token_prob = std::nan("");
  EXPECT_NE(message_of(c).find("min_token_prob"), std::string::npos);
}

// Random requests started, grown, proposed from and stopped in random order against a scan of
// each request's prompt + output and of the outputs a FIFO of max_cached_requests would keep.
TEST(SuffixDecodingTest, ProposalsMatchANaiveScanOfRequestAndCache) {
  std::mt19937 rng(16);
  int num_local_drafts = 0, num_global_drafts = 0;  // both sources must be exercised
  for (int trial = 0; trial < 60; ++trial) {
    SuffixDecodingConfig c =
        config(1 + static_cast<int>(rng() % 6), static_cast<int>(rng() % 4), 1 + static_cast<int>(rng() % 8));
    c.max_spec_factor = 0.5 * (rng() % 5);
    c.min_token_prob = 0.1 * (rng() % 6);
    c.max_cached_tokens = rng() % 2 ? 1 + rng() % 12 : int64_t{1} << 20;
    SuffixDecoding sd(c);
    const unsigned alphabet = 2 + rng() % 3;
    std::map<RequestIdx, std::pair<Tokens, Tokens>> live;  // prompt + output so far, output alone
    std::deque<Tokens> cached;
    RequestIdx next_id = 0;
    for (int op = 0; op < 80; ++op) {
      const unsigned kind = rng() % 8;
      if (live.empty() || kind == 0) {
        Tokens prompt(rng() % 10);
        for (auto& t : prompt) t = static_cast<TokenId>(rng() % alphabet);
        ASSERT_TRUE(sd.start_request(next_id, prompt).ok());
        live[next_id++] = {prompt, {}};
        continue;
      }
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      if (kind == 1) {
        ASSERT_TRUE(sd.stop_request(it->first).ok());
        const Tokens& out = it->second.second;
        if (c.max_cached_requests > 0 && !out.empty() &&
            static_cast<int64_t>(out.size()) <= c.max_cached_tokens) {
          cached.push_back(out);
        }
        auto cached_tokens = [&] {
          int64_t n = 0;
          for (const auto& o : cached) n += static_cast<int64_t>(o.size());
          return n;
        };
        while (static_cast<int>(cached.size()) > c.max_cached_requests ||
               cached_tokens() > c.max_cached_tokens) {
          cached.pop_front();
        }
        live.erase(it);
      } else if (kind < 5) {
        Tokens out(1 + rng() % 3);
        for (auto& t : out) t = static_cast<TokenId>(rng() % alphabet);
        ASSERT_TRUE(sd.add_output(it->first, out).ok());
        it->second.first.insert(it->second.first.end(), out.begin(), out.end());
        it->second.second.insert(it->second.second.end(), out.begin(), out.end());
      } else {
        const int max_tokens = static_cast<int>(rng() % 8);
        SuffixSpeculateParams p;
        p.max_tokens = std::min(max_tokens, c.num_speculative_tokens);
        p.max_spec_factor = c.max_spec_factor;
        p.max_spec_offset = c.max_spec_offset;
        p.min_token_prob = c.min_token_prob;
        const Tokens& ctx = it->second.first;
        SuffixDraft local = testing::naive_speculate({ctx}, ctx, c.max_tree_depth, p);
        SuffixDraft global =
            testing::naive_speculate({cached.begin(), cached.end()}, ctx, c.max_tree_depth, p);
        const SuffixDraft& want = global.score > local.score ? global : local;
        SuffixDraft got = propose_ok(sd, it->first, max_tokens);
        ASSERT_EQ(got.token_ids, want.token_ids) << "trial " << trial << " op " << op;
        ASSERT_EQ(got.match_len, want.match_len);
        ASSERT_DOUBLE_EQ(got.score, want.score);
        if (!got.token_ids.empty()) (global.score > local.score ? num_global_drafts : num_local_drafts)++;
      }
      sd.check_invariants();
      ASSERT_EQ(sd.num_cached_requests(), static_cast<int>(cached.size()));
    }
  }
  EXPECT_GT(num_local_drafts, 50);
  EXPECT_GT(num_global_drafts, 50);
}

}  // namespace
}  // namespace kvasir
