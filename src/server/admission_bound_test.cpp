#include "server/admission_bound.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvasir::server {
namespace {

TEST(AdmissionBound, CountsSequencesNotRequests) {
  AdmissionBound bound(16);
  EXPECT_TRUE(bound.try_admit(10).ok());
  // 10 + 8 > 16: one request, but it would take the queue past its bound.
  const Status full = bound.try_admit(8);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.message();
  EXPECT_EQ(bound.num_waiting(), 10);  // a refused request adds nothing
  EXPECT_TRUE(bound.try_admit(6).ok());
  EXPECT_EQ(bound.num_waiting(), 16);
  EXPECT_EQ(bound.try_admit(1).code(), StatusCode::kResourceExhausted);
  bound.release(10);
  EXPECT_TRUE(bound.try_admit(8).ok());
  EXPECT_EQ(bound.num_waiting(), 14);
}

TEST(AdmissionBound, ARequestLargerThanTheWholeBoundIsInvalidNotRetryable) {
  AdmissionBound bound(16);
  // 1,024 prompts x n = 128 against an empty queue: waiting for room cannot help.
  const Status never = bound.try_admit(int64_t{1024} * 128);
  EXPECT_EQ(never.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(never.message().find("131072"), std::string::npos) << never.message();
  EXPECT_NE(never.message().find("--max-num-queued-reqs"), std::string::npos) << never.message();
  EXPECT_EQ(bound.try_admit(17).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bound.num_waiting(), 0);
  EXPECT_TRUE(bound.try_admit(16).ok());  // exactly the bound fits an empty queue
}

TEST(AdmissionBound, ConcurrentRequestsNeverTogetherPassTheBound) {
  constexpr int64_t kMax = 64;
  AdmissionBound bound(kMax);
  std::atomic<int64_t> admitted_now{0}, peak{0}, num_refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const int64_t size = 5 + t;  // 5..12: any 8 together exceed 64, a few fit
      for (int i = 0; i < 2000; ++i) {
        if (!bound.try_admit(size).ok()) {
          num_refused.fetch_add(1);
          continue;
        }
        const int64_t now = admitted_now.fetch_add(size) + size;
        int64_t p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        admitted_now.fetch_sub(size);
        bound.release(size);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(peak.load(), kMax);
  EXPECT_EQ(bound.num_waiting(), 0);
  EXPECT_GT(peak.load(), 0);
}

TEST(AdmissionBoundDeathTest, ReleasingMoreThanAdmittedIsABug) {
  AdmissionBound bound(4);
  ASSERT_TRUE(bound.try_admit(2).ok());
  EXPECT_DEATH(bound.release(3), "released more");
}

}  // namespace
}  // namespace kvasir::server
