// BackendCapabilities: the decode-bucket rule callers pad by, and what the CPU reference reports.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace kvasir {
namespace {

TEST(BackendCapabilities, DecodeBucketsAreOneTwoFourThenMultiplesOfEight) {
  BackendCapabilities c;
  c.decode_batch_buckets = true;
  const int expected[][2] = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {17, 24}, {250, 256}};
  for (const auto& e : expected) EXPECT_EQ(c.decode_bucket(e[0], 256), e[1]) << e[0];
  // Every size up to exact_decode_buckets_up_to is its own bucket.
  c.exact_decode_buckets_up_to = 8;
  const int exact[][2] = {{3, 3}, {5, 5}, {7, 7}, {8, 8}, {9, 16}, {17, 24}};
  for (const auto& e : exact) EXPECT_EQ(c.decode_bucket(e[0], 256), e[1]) << e[0];
  c.exact_decode_buckets_up_to = 2;
  // Capped at max_num_seqs, never below the batch itself.
  EXPECT_EQ(c.decode_bucket(9, 12), 12);
  EXPECT_EQ(c.decode_bucket(20, 12), 20);
}

TEST(BackendCapabilities, NoBucketsLeavesTheBatchAsItIs) {
  BackendCapabilities c;
  for (int n : {1, 3, 5, 9, 300}) EXPECT_EQ(c.decode_bucket(n, 256), n);
}

TEST(BackendCapabilities, CpuReportsItsDtypesAndNoDeviceFeatures) {
  CpuBackendOptions opts;
  opts.num_threads = 1;
  opts.kv_cache_dtype = DType::kF16;
  CpuBackend cpu(opts);
  const BackendCapabilities c = cpu.capabilities();
  EXPECT_EQ(c.activation_dtype, DType::kF32);
  EXPECT_EQ(c.kv_cache_dtype, DType::kF16);
  EXPECT_FALSE(c.device_sampling);
  EXPECT_EQ(c.device_sampling, cpu.supports_device_sampling());
  EXPECT_FALSE(c.decode_batch_buckets);
  EXPECT_FALSE(c.graph_replay);
}

}  // namespace
}  // namespace kvasir
