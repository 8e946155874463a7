#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace kvasir {
namespace {

BlockHash make_hash(int v) {
  BlockHash h;
  h.bytes[0] = static_cast<uint8_t>(v);
  h.bytes[1] = static_cast<uint8_t>(v >> 8);
  h.bytes[31] = 0xab;
  return h;
}

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(5, true);
  EXPECT_EQ(pool.get_num_free_blocks(), 4);
  const std::vector<BlockId> got = pool.get_new_blocks(4);
  EXPECT_EQ(got, (std::vector<BlockId>{1, 2, 3, 4}));
  EXPECT_EQ(pool.get_num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  pool.check_invariants();
}

TEST(BlockPool, FreedBlocksAreReusedInFreeOrder) {
  BlockPool pool(5, true);
  const std::vector<BlockId> got = pool.get_new_blocks(4);
  pool.free_blocks(std::vector<BlockId>{3, 1});
  pool.free_blocks(std::vector<BlockId>{4, 2});
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.get_new_blocks(4), (std::vector<BlockId>{3, 1, 4, 2}));
  pool.check_invariants();
}

TEST(BlockPool, CachedFreeBlockCanBeRevivedUntilEvicted) {
  BlockPool pool(4, true);
  const std::vector<BlockId> a = pool.get_new_blocks(2);  // 1, 2
  EXPECT_TRUE(pool.cache_full_block(a[0], make_hash(1)));
  pool.free_blocks(std::vector<BlockId>{a[1], a[0]});  // 2 evicted before 1
  EXPECT_EQ(pool.get_cached_block(make_hash(1)), a[0]);
  EXPECT_EQ(pool.get_num_free_blocks(), 3);
  pool.touch(std::vector<BlockId>{a[0]});
  EXPECT_EQ(pool.ref_cnt(a[0]), 1);
  EXPECT_EQ(pool.get_num_free_blocks(), 2);
  pool.check_invariants();
  pool.free_block(a[0]);
  // Eviction takes the least recently freed block first: 3 (never used), then 2, then 1.
  EXPECT_EQ(pool.get_new_blocks(2), (std::vector<BlockId>{3, 2}));
  EXPECT_TRUE(pool.get_cached_block(make_hash(1)).has_value());
  EXPECT_EQ(pool.get_new_blocks(1), (std::vector<BlockId>{1}));
  EXPECT_FALSE(pool.get_cached_block(make_hash(1)).has_value());
  EXPECT_FALSE(pool.block_hash(1).has_value());
  EXPECT_EQ(pool.num_evictions(), 1);
  pool.check_invariants();
}

TEST(BlockPool, SecondBlockWithSameContentIsNotPublished) {
  BlockPool pool(4, true);
  const std::vector<BlockId> a = pool.get_new_blocks(2);
  EXPECT_TRUE(pool.cache_full_block(a[0], make_hash(9)));
  EXPECT_FALSE(pool.cache_full_block(a[1], make_hash(9)));
  EXPECT_TRUE(pool.cache_full_block(a[0], make_hash(9)));  // idempotent
  EXPECT_EQ(pool.get_cached_block(make_hash(9)), a[0]);
  EXPECT_FALSE(pool.block_hash(a[1]).has_value());
  pool.check_invariants();
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(4, true);
  const std::vector<BlockId> a = pool.get_new_blocks(1);
  EXPECT_TRUE(pool.cache_full_block(a[0], make_hash(3)));
  EXPECT_FALSE(pool.reset_prefix_cache());
  pool.free_blocks(a);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_FALSE(pool.get_cached_block(make_hash(3)).has_value());
  pool.check_invariants();
}

TEST(BlockPool, CachingDisabledFindsNothing) {
  BlockPool pool(4, false);
  EXPECT_FALSE(pool.get_cached_block(make_hash(1)).has_value());
  pool.check_invariants();
}

TEST(BlockPool, CountCachedPrefixStopsAtTheFirstMissAndSeesEvictions) {
  BlockPool pool(8, true);
  auto a = pool.get_new_blocks(3);
  EXPECT_TRUE(pool.cache_full_block(a[0], make_hash(1)));
  EXPECT_TRUE(pool.cache_full_block(a[2], make_hash(3)));
  const std::vector<BlockHash> chain = {make_hash(1), make_hash(2), make_hash(3)};
  EXPECT_EQ(pool.count_cached_prefix(chain), 1);  // 3 is cached but follows a miss
  EXPECT_TRUE(pool.cache_full_block(a[1], make_hash(2)));
  EXPECT_EQ(pool.count_cached_prefix(chain), 3);
  pool.free_blocks(a);
  EXPECT_EQ(pool.count_cached_prefix(chain), 3);  // freed but revivable
  pool.get_new_blocks(7);  // every usable block: the cached ones are evicted
  EXPECT_EQ(pool.count_cached_prefix(chain), 0);
  EXPECT_EQ(BlockPool(4, false).count_cached_prefix(chain), 0);
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(4, true);
  const std::vector<BlockId> a = pool.get_new_blocks(1);
  pool.free_blocks(a);
  EXPECT_DEATH(pool.free_blocks(a), "double free");
}

TEST(BlockPoolDeathTest, HashesAreWriteOnce) {
  BlockPool pool(4, true);
  const std::vector<BlockId> a = pool.get_new_blocks(1);
  ASSERT_TRUE(pool.cache_full_block(a[0], make_hash(1)));
  EXPECT_DEATH(pool.cache_full_block(a[0], make_hash(2)), "write-once");
}

// Random holders take, share, publish and release blocks; a shadow model checks ref counts and
// the pool's own invariants after every operation.
TEST(BlockPool, RandomizedOperationsKeepInvariants) {
  constexpr int kBlocks = 24;
  std::mt19937 rng(1234);
  BlockPool pool(kBlocks, true);
  std::vector<std::vector<BlockId>> holders;
  std::vector<int> expected(kBlocks, 0);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int step = 0; step < 20000; ++step) {
    const int op = pick(10);
    if (op < 3) {
      const int n = pick(6);
      if (n <= pool.get_num_free_blocks()) {
        holders.push_back(pool.get_new_blocks(n));
        for (BlockId b : holders.back()) ++expected[b];
      }
    } else if (op < 5 && !holders.empty()) {
      std::vector<BlockId>& h =
          holders[static_cast<size_t>(pick(static_cast<int>(holders.size())))];
      if (!h.empty()) {
        const BlockId b = h[static_cast<size_t>(pick(static_cast<int>(h.size())))];
        pool.cache_full_block(b, pool.block_hash(b).value_or(make_hash(pick(40))));
      }
    } else if (op < 7) {
      // A prefix hit: revive whatever block holds one of a few contents.
      const std::optional<BlockId> b = pool.get_cached_block(make_hash(pick(40)));
      if (b) {
        pool.touch(std::vector<BlockId>{*b});
        holders.push_back({*b});
        ++expected[*b];
      }
    } else if (!holders.empty()) {
      const size_t i = static_cast<size_t>(pick(static_cast<int>(holders.size())));
      std::vector<BlockId> h = std::move(holders[i]);
      holders.erase(holders.begin() + static_cast<ptrdiff_t>(i));
      if (pick(2) == 0) std::reverse(h.begin(), h.end());
      pool.free_blocks(h);
      for (BlockId b : h) --expected[b];
    }
    pool.check_invariants();
    for (BlockId b = 0; b < kBlocks; ++b)
      ASSERT_EQ(pool.ref_cnt(b), expected[b]) << "step " << step;
  }
  for (const auto& h : holders) pool.free_blocks(h);
  pool.check_invariants();
  EXPECT_EQ(pool.get_num_free_blocks(), kBlocks - 1);
}

}  // namespace
}  // namespace kvasir
