#include "spec/suffix_child_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvasir {
namespace {

// Random inserts and erases over few parents and tokens (long probe runs, runs wrapping past the
// table's end, several rehashes) must always agree with a std::map.
TEST(SuffixChildIndexTest, AgreesWithAMapUnderRandomInsertsAndErases) {
  std::mt19937 rng(99);
  SuffixChildIndex index;
  std::map<std::pair<int32_t, TokenId>, int32_t> want;
  int32_t next_child = 1;
  for (int op = 0; op < 200000; ++op) {
    const int32_t parent = static_cast<int32_t>(rng() % 300);
    const TokenId token = static_cast<TokenId>(rng() % 40);
    auto it = want.find({parent, token});
    // Grow to ~6000 entries, then churn around that size.
    const bool grow = want.size() < 6000 && rng() % 3 != 0;
    if (it == want.end() && (grow || rng() % 2 == 0)) {
      index.insert(parent, token, next_child);
      want[{parent, token}] = next_child++;
    } else if (it != want.end() && !grow) {
      index.erase(parent, token);
      want.erase(it);
    }
    auto now = want.find({parent, token});
    ASSERT_EQ(index.find(parent, token), now == want.end() ? SuffixChildIndex::kNone : now->second);
    if (op % 20000 == 0) index.check_invariants();
  }
  ASSERT_EQ(index.size(), static_cast<int64_t>(want.size()));
  for (const auto& [key, child] : want) ASSERT_EQ(index.find(key.first, key.second), child);
  index.check_invariants();
  for (const auto& [key, child] : want) index.erase(key.first, key.second);
  EXPECT_EQ(index.size(), 0);
  index.check_invariants();
}

TEST(SuffixChildIndexDeathTest, ErasingAnAbsentEdgeAborts) {
  SuffixChildIndex index;
  index.insert(1, 2, 3);
  EXPECT_DEATH(index.erase(1, 5), "erasing an absent edge");
}

}  // namespace
}  // namespace kvasir
