#include "backend/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace kvasir {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, StaticSplitGivesContiguousNearEqualRanges) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
  std::atomic<int> calls{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e) {
    ranges[static_cast<size_t>(calls.fetch_add(1))] = {b, e};
  });
  ASSERT_EQ(calls.load(), 3);
  for (const auto& r : ranges) EXPECT_GE(r.second - r.first, 3);
}

TEST(ThreadPool, DynamicCoversEveryIndexExactlyOnce) {
  ThreadPool pool(2);
  for (int64_t grain : {1, 3, 100}) {
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for_dynamic(1000, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, RunOnAllGivesEachThreadItsIndex) {
  ThreadPool pool(4);
  std::vector<int> seen(4, 0);
  pool.run_on_all([&](int tid, int nt) {
    EXPECT_EQ(nt, 4);
    seen[static_cast<size_t>(tid)]++;
  });
  for (int s : seen) EXPECT_EQ(s, 1);
}

TEST(ThreadPool, NestedRegionsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 40);
}

// Many short regions back to back: the decode pattern. Results written by workers must be
// visible to the caller when parallel_for returns (TSan checks the happens-before edges).
TEST(ThreadPool, ManyShortRegionsPublishResults) {
  ThreadPool pool(2);
  std::vector<int64_t> out(64, 0);
  for (int iter = 0; iter < 20000; ++iter) {
    pool.parallel_for(64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = iter + i;
    });
    for (int64_t i = 0; i < 64; i += 21) ASSERT_EQ(out[static_cast<size_t>(i)], iter + i);
  }
}

TEST(ThreadPool, WakesWorkersAfterTheySleep) {
  ThreadPoolOptions opts;
  opts.spin_us = 50;  // workers fall asleep quickly
  ThreadPool pool(3, opts);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<int> calls{0};
    pool.parallel_for(3, [&](int64_t, int64_t) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 3);
  }
}

}  // namespace
}  // namespace kvasir
