#include "api/data_parallel.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

TEST(DataParallelReplicaArgs, OneReplicaKeepsTheArgs) {
  EngineArgs a;
  a.num_threads = 0;
  EXPECT_EQ(data_parallel_replica_args(a, 0, 8).num_threads, 0);
  EXPECT_EQ(data_parallel_replica_args(a, 0, 8).kv_cache_memory, a.kv_cache_memory);
}

TEST(DataParallelReplicaArgs, ThreadsSplitAndPerEngineKnobsStay) {
  EngineArgs a;
  a.data_parallel_size = 2;
  a.kv_cache_memory = int64_t{1} << 30;
  EXPECT_EQ(data_parallel_replica_args(a, 0, 2).num_threads, 1);  // all cores by default
  EXPECT_EQ(data_parallel_replica_args(a, 1, 2).num_threads, 1);
  EXPECT_EQ(data_parallel_replica_args(a, 1, 2).kv_cache_memory, int64_t{1} << 30);  // per replica, as vLLM
  EXPECT_EQ(data_parallel_replica_args(a, 1, 2).max_num_seqs, a.max_num_seqs);
  a.data_parallel_size = 3;
  a.num_threads = 7;  // 3 + 2 + 2
  EXPECT_EQ(data_parallel_replica_args(a, 0, 64).num_threads, 3);
  EXPECT_EQ(data_parallel_replica_args(a, 1, 64).num_threads, 2);
  EXPECT_EQ(data_parallel_replica_args(a, 2, 64).num_threads, 2);
  a.num_threads = 2;  // fewer threads than replicas: one each, oversubscribed
  EXPECT_EQ(data_parallel_replica_args(a, 2, 64).num_threads, 1);
}

TEST(DataParallelReplicaArgs, ThreadsSplitBetweenThisNodesReplicasOnly) {
  EngineArgs a;
  a.data_parallel_size = 4;
  a.data_parallel.size_local = 2;  // the other two run on another node, on its cores
  a.num_threads = 6;
  EXPECT_EQ(data_parallel_replica_args(a, 0, 64).num_threads, 3);
  EXPECT_EQ(data_parallel_replica_args(a, 1, 64).num_threads, 3);
  a.data_parallel.size_local = 1;
  EXPECT_EQ(data_parallel_replica_args(a, 0, 64).num_threads, 6);
}

TEST(DataParallelArgs, RefusedWithTensorParallelism) {
  EngineArgs a;
  a.data_parallel_size = 2;
  a.tensor_parallel_size = 2;
  const Status s = a.validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--data-parallel-size with --tensor-parallel-size"), std::string::npos);
  a.tensor_parallel_size = 1;
  EXPECT_TRUE(a.validate().ok());
  a.data_parallel_size = 0;
  EXPECT_FALSE(a.validate().ok());
}

}  // namespace
}  // namespace kvasir
