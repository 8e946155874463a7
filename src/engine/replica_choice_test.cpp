#include "engine/replica_choice.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvasir {
namespace {

TEST(ReplicaChoice, LongestCachedPrefixWinsOverLoad) {
  std::vector<ReplicaState> r = {{0, 0, false}, {3, 9, false}, {2, 0, false}};
  EXPECT_EQ(choose_replica(r, 0), 1);
  EXPECT_EQ(choose_replica(r, 2), 1);
}

TEST(ReplicaChoice, LeastLoadedWhenNothingIsCached) {
  std::vector<ReplicaState> r = {{0, 4, false}, {0, 1, false}, {0, 2, false}};
  EXPECT_EQ(choose_replica(r, 0), 1);
  EXPECT_EQ(choose_replica(r, 2), 1);
}

TEST(ReplicaChoice, TiesRotateWithStart) {
  std::vector<ReplicaState> r = {{0, 0, false}, {0, 0, false}};
  EXPECT_EQ(choose_replica(r, 0), 0);
  EXPECT_EQ(choose_replica(r, 1), 1);
  EXPECT_EQ(choose_replica(r, 2), 0);
  std::vector<ReplicaState> cached = {{2, 5, false}, {2, 5, false}};
  EXPECT_EQ(choose_replica(cached, 1), 1);
}

TEST(ReplicaChoice, DeadReplicasAreSkipped) {
  std::vector<ReplicaState> r = {{5, 0, true}, {0, 7, false}};
  EXPECT_EQ(choose_replica(r, 0), 1);
  std::vector<ReplicaState> all_dead = {{0, 0, true}, {0, 0, true}};
  EXPECT_EQ(choose_replica(all_dead, 0), -1);
  EXPECT_EQ(choose_replica(std::vector<ReplicaState>{}, 0), -1);
}

}  // namespace
}  // namespace kvasir
