#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "core/request.h"
#include "kv/block_hash.h"

namespace kvasir {
namespace {

constexpr int kBs = 4;

std::unique_ptr<Request> make_req(RequestIdx idx, std::vector<TokenId> tokens,
                                  RequestOptions opt = {}) {
  SamplingParams sp;
  sp.max_tokens = 64;
  auto r =
      std::make_unique<Request>("r" + std::to_string(idx), std::move(tokens), sp, std::move(opt));
  r->set_idx(idx);
  return r;
}

std::vector<TokenId> iota_tokens(int n, int start = 100) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

// Admits a request with its prefix hit, computes all its tokens and publishes its blocks.
void run_prefill(KvCacheManager& kv, Request& r) {
  const auto hit = kv.get_computed_blocks(r);
  ASSERT_TRUE(kv.allocate_slots(r, r.num_tokens() - hit.num_computed_tokens,
                                hit.num_computed_tokens, hit.blocks));
  r.set_num_computed_tokens(r.num_tokens());
  kv.cache_blocks(r, r.num_computed_tokens());
  kv.check_invariants();
}

TEST(KvCacheManager, PrefixHitIsCappedSoTheLastTokenIsComputed) {
  KvCacheManager kv(16, kBs, 1024, true);
  auto a = make_req(1, iota_tokens(8));
  run_prefill(kv, *a);
  kv.free(*a);
  auto same = make_req(2, iota_tokens(8));
  const auto hit = kv.get_computed_blocks(*same);
  EXPECT_EQ(hit.num_computed_tokens, 4) << "8 tokens: at most 7 hit, rounded down to a block";
  auto longer = make_req(3, iota_tokens(9));
  EXPECT_EQ(kv.get_computed_blocks(*longer).num_computed_tokens, 8);
  auto other = make_req(4, iota_tokens(9, 7));
  EXPECT_EQ(kv.get_computed_blocks(*other).num_computed_tokens, 0);
  EXPECT_EQ(kv.prefix_cache_stats().num_requests, 4);
  EXPECT_EQ(kv.prefix_cache_stats().num_hit_tokens, 12);
  kv.check_invariants();
}

TEST(KvCacheManager, BlocksArePublishedOnlyOnceComputed) {
  KvCacheManager kv(16, kBs, 1024, true);
  auto a = make_req(1, iota_tokens(9));
  ASSERT_TRUE(kv.allocate_slots(*a, 9));
  auto b = make_req(2, iota_tokens(9));
  EXPECT_EQ(kv.get_computed_blocks(*b).num_computed_tokens, 0) << "allocated is not computed";
  a->set_num_computed_tokens(6);
  kv.cache_blocks(*a, 6);
  EXPECT_EQ(kv.get_computed_blocks(*b).num_computed_tokens, 4);
  kv.check_invariants();
}

TEST(KvCacheManager, FailedAllocationChangesNothing) {
  KvCacheManager kv(5, kBs, 1024, true);  // 4 usable blocks
  auto a = make_req(1, iota_tokens(12));
  ASSERT_TRUE(kv.allocate_slots(*a, 12));
  auto b = make_req(2, iota_tokens(8, 500));
  EXPECT_FALSE(kv.allocate_slots(*b, 8).has_value());
  EXPECT_EQ(kv.get_num_free_blocks(), 1);
  EXPECT_TRUE(kv.get_block_ids(*b).empty());
  const auto one = kv.allocate_slots(*b, 4);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size(), 1u);
  kv.check_invariants();
}

TEST(KvCacheManager, GrowingATableAllocatesOnlyMissingBlocks) {
  KvCacheManager kv(16, kBs, 1024, true);
  auto a = make_req(1, iota_tokens(5));
  EXPECT_EQ(kv.allocate_slots(*a, 3)->size(), 1u);
  a->set_num_computed_tokens(3);
  EXPECT_EQ(kv.allocate_slots(*a, 1)->size(), 0u);
  a->set_num_computed_tokens(4);
  EXPECT_EQ(kv.allocate_slots(*a, 1)->size(), 1u);
  EXPECT_EQ(kv.get_block_ids(*a).size(), 2u);
  kv.check_invariants();
}

TEST(KvCacheManager, RevivingCachedBlocksCountsAgainstFreeSpace) {
  KvCacheManager kv(5, kBs, 1024, true);  // 4 usable
  auto a = make_req(1, iota_tokens(8));
  run_prefill(kv, *a);
  kv.free(*a);
  ASSERT_EQ(kv.get_num_free_blocks(), 4);
  // 8 cached + 12 new tokens = 5 blocks > 4: must fail even though only 3 are "new".
  auto big = make_req(2, iota_tokens(20));
  auto hit = kv.get_computed_blocks(*big);
  ASSERT_EQ(hit.num_computed_tokens, 8);
  EXPECT_FALSE(kv.allocate_slots(*big, 12, 8, hit.blocks).has_value());
  kv.check_invariants();
  auto fits = make_req(3, iota_tokens(16));
  hit = kv.get_computed_blocks(*fits);
  ASSERT_TRUE(kv.allocate_slots(*fits, 8, 8, hit.blocks).has_value());
  EXPECT_EQ(kv.get_num_free_blocks(), 0);
  kv.check_invariants();
}

TEST(KvCacheManager, FreeEvictsTheTailOfASequenceFirst) {
  KvCacheManager kv(4, kBs, 1024, true);  // 3 usable
  auto a = make_req(1, iota_tokens(12));
  run_prefill(kv, *a);
  kv.free(*a);
  auto other = make_req(2, iota_tokens(3, 900));
  ASSERT_TRUE(kv.allocate_slots(*other, 3));  // evicts a's third block only
  auto again = make_req(3, iota_tokens(12));
  EXPECT_EQ(kv.get_computed_blocks(*again).num_computed_tokens, 8);
  kv.check_invariants();
}

TEST(KvCacheManager, PromptLogprobsRequestsSkipTheCache) {
  KvCacheManager kv(16, kBs, 1024, true);
  auto a = make_req(1, iota_tokens(9));
  run_prefill(kv, *a);
  SamplingParams sp;
  sp.prompt_logprobs = 1;
  Request b("b", iota_tokens(9), sp);
  b.set_idx(2);
  EXPECT_EQ(kv.get_computed_blocks(b).num_computed_tokens, 0);
}

TEST(KvCacheManager, CacheSaltAndAdapterIsolateHits) {
  KvCacheManager kv(16, kBs, 1024, true);
  RequestOptions salt_a;
  salt_a.cache_salt = "a";
  auto a = make_req(1, iota_tokens(9), salt_a);
  run_prefill(kv, *a);
  auto plain = make_req(2, iota_tokens(9));
  EXPECT_EQ(kv.get_computed_blocks(*plain).num_computed_tokens, 0);
  RequestOptions salt_b;
  salt_b.cache_salt = "b";
  auto b = make_req(3, iota_tokens(9), salt_b);
  EXPECT_EQ(kv.get_computed_blocks(*b).num_computed_tokens, 0);
  auto a2 = make_req(4, iota_tokens(9), salt_a);
  EXPECT_EQ(kv.get_computed_blocks(*a2).num_computed_tokens, 8);
  RequestOptions lora;
  lora.cache_salt = "a";
  lora.adapter_id = 3;
  auto l = make_req(5, iota_tokens(9), lora);
  EXPECT_EQ(kv.get_computed_blocks(*l).num_computed_tokens, 0);
}

TEST(KvCacheManager, ForkSharesComputedFullBlocks) {
  KvCacheManager kv(16, kBs, 1024, true);
  auto parent = make_req(1, iota_tokens(10));
  ASSERT_TRUE(kv.allocate_slots(*parent, 10));
  parent->set_num_computed_tokens(10);
  auto child = make_req(2, iota_tokens(10));
  EXPECT_EQ(kv.fork(*parent, *child), 8);
  EXPECT_EQ(child->num_computed_tokens(), 8);
  const auto pt = kv.get_block_ids(*parent);
  const auto ct = kv.get_block_ids(*child);
  ASSERT_EQ(ct.size(), 2u);
  EXPECT_TRUE(std::equal(ct.begin(), ct.end(), pt.begin()));
  EXPECT_EQ(kv.pool().ref_cnt(pt[0]), 2);
  ASSERT_TRUE(kv.allocate_slots(*child, 2));  // its own third block
  EXPECT_NE(kv.get_block_ids(*child)[2], pt[2]);
  kv.check_invariants();
  kv.free(*parent);
  kv.free(*child);
  kv.check_invariants();
  EXPECT_EQ(kv.get_num_free_blocks(), 15);
}

TEST(KvCacheManager, DisabledCachingNeverHits) {
  KvCacheManager kv(16, kBs, 1024, false);
  auto a = make_req(1, iota_tokens(9));
  run_prefill(kv, *a);
  kv.free(*a);
  auto b = make_req(2, iota_tokens(9));
  EXPECT_EQ(kv.get_computed_blocks(*b).num_computed_tokens, 0);
  EXPECT_EQ(kv.pool().num_cached_blocks(), 0);
}

// Requests with shared prefixes are admitted, advanced chunk by chunk, given output tokens, and
// freed at random (finish, abort, preemption). A shadow records what each block was written with;
// every prefix hit must point at blocks holding exactly the request's content.
TEST(KvCacheManager, RandomizedLifecyclesKeepInvariantsAndServeRightContent) {
  std::mt19937 rng(42);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  KvCacheManager kv(40, kBs, 1024, true);
  std::map<BlockId, BlockHash> written;
  std::vector<std::unique_ptr<Request>> live;
  RequestIdx next = 1;
  int hits = 0;
  auto write_computed = [&](Request& r, int from, int to) {
    update_block_hashes(r, kBs);
    const auto table = kv.get_block_ids(r);
    for (int i = from / kBs; i < to / kBs; ++i) written[table[i]] = r.block_hashes()[i];
  };
  for (int step = 0; step < 6000; ++step) {
    const int op = pick(10);
    if (op < 3 && live.size() < 12) {
      std::vector<TokenId> t = iota_tokens(4 * pick(3), 10 * pick(3));  // a few shared prefixes
      const int extra = 1 + pick(14);
      for (int i = 0; i < extra; ++i) t.push_back(pick(4));
      auto r = make_req(next++, std::move(t));
      const auto hit = kv.get_computed_blocks(*r);
      for (size_t i = 0; i < hit.blocks.size(); ++i) {
        ASSERT_EQ(written.at(hit.blocks[i]), r->block_hashes()[i]) << "stale block served";
      }
      hits += hit.num_computed_tokens;
      const int n = std::min(r->num_tokens() - hit.num_computed_tokens, 1 + pick(8));
      if (kv.allocate_slots(*r, n, hit.num_computed_tokens, hit.blocks)) {
        r->set_num_computed_tokens(hit.num_computed_tokens + n);
        write_computed(*r, hit.num_computed_tokens, r->num_computed_tokens());
        kv.cache_blocks(*r, r->num_computed_tokens());
        live.push_back(std::move(r));
      }
    } else if (op < 8 && !live.empty()) {
      Request& r = *live[static_cast<size_t>(pick(static_cast<int>(live.size())))];
      if (r.num_computed_tokens() == r.num_tokens()) r.append_output_token(pick(4));  // decode
      const int before = r.num_computed_tokens();
      const int n = std::min(r.num_tokens() - before, 1 + pick(8));
      if (kv.allocate_slots(r, n)) {
        r.set_num_computed_tokens(before + n);
        write_computed(r, before, before + n);
        kv.cache_blocks(r, r.num_computed_tokens());
      }
    } else if (!live.empty()) {
      const size_t i = static_cast<size_t>(pick(static_cast<int>(live.size())));
      kv.free(*live[i]);
      live.erase(live.begin() + static_cast<ptrdiff_t>(i));
    }
    kv.check_invariants();
  }
  for (auto& r : live) kv.free(*r);
  kv.check_invariants();
  EXPECT_EQ(kv.get_num_free_blocks(), 39) << "leaked blocks";
  EXPECT_GT(hits, 0) << "the workload should exercise prefix hits";
  EXPECT_GT(kv.pool().num_evictions(), 0) << "the workload should exercise eviction";
}

}  // namespace
}  // namespace kvasir
