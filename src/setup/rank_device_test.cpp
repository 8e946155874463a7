// gpu_for_rank: a rank drives the GPU of its local rank on its host under every placement the
// launchers produce (one host, two nodes of two, mpirun's alternating hosts), never its global
// rank, and a host with more ranks than GPUs is refused naming both counts.
#include "setup/rank_device.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

TEST(RankDevice, OneHostRankRDrivesGpuR) {
  for (int r = 0; r < 4; ++r) {
    auto d = gpu_for_rank(RankPlacement{r, 4}, 8);
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(*d, r);
  }
}

TEST(RankDevice, OnTwoNodesEachNodesRanksStartAtGpuZero) {
  // --nnodes 2 at 4 ranks: global ranks 2 and 3 are node 1's local ranks 0 and 1.
  for (int rank = 0; rank < 4; ++rank) {
    auto d = gpu_for_rank(RankPlacement{rank % 2, 2}, 2);
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(*d, rank % 2) << "global rank " << rank;
  }
}

TEST(RankDevice, MoreRanksThanGpusOnAHostIsRefusedNamingBoth) {
  auto d = gpu_for_rank(RankPlacement{1, 3}, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("runs 3 ranks of the group but has 2 visible CUDA device(s)"), std::string::npos)
      << d.status().message();
  auto none = gpu_for_rank(RankPlacement{0, 1}, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_FALSE(gpu_for_rank(RankPlacement{2, 2}, 4).ok());
  EXPECT_FALSE(gpu_for_rank(RankPlacement{-1, 2}, 4).ok());
}

}  // namespace
}  // namespace kvasir
