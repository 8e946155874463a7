#include "server/handler_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kvasir::server {
namespace {

using namespace std::chrono_literals;

// Holds the pool's threads until released, so a test controls what is running.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  void wait() const { opened.wait(); }
};

TEST(HandlerPool, RunsTasksOffTheCallersThread) {
  HandlerPool pool({2, 8, 1 << 20});
  std::promise<std::thread::id> ran_on;
  ASSERT_TRUE(pool.try_submit(10, [&] { ran_on.set_value(std::this_thread::get_id()); }));
  EXPECT_NE(ran_on.get_future().get(), std::this_thread::get_id());
}

TEST(HandlerPool, RefusesPastTheTaskBoundUntilOneFinishes) {
  HandlerPool pool({1, 2, 1 << 20});
  Gate gate;
  ASSERT_TRUE(pool.try_submit(1, [&] { gate.wait(); }));
  ASSERT_TRUE(pool.try_submit(1, [] {}));
  EXPECT_FALSE(pool.try_submit(1, [] {}));  // one running, one queued: full
  EXPECT_EQ(pool.num_tasks(), 2u);
  gate.open.set_value();
  for (int i = 0; i < 1000 && pool.num_tasks() > 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(pool.num_tasks(), 0u);
  EXPECT_TRUE(pool.try_submit(1, [] {}));
}

TEST(HandlerPool, RefusesPastTheByteBoundButTakesOneBigTaskWhenIdle) {
  HandlerPool pool({1, 100, 1000});
  Gate gate;
  ASSERT_TRUE(pool.try_submit(600, [&] { gate.wait(); }));
  EXPECT_FALSE(pool.try_submit(600, [] {}));  // 1200 bytes would be held
  EXPECT_TRUE(pool.try_submit(400, [] {}));   // exactly at the bound
  gate.open.set_value();
  for (int i = 0; i < 1000 && pool.num_tasks() > 0; ++i) std::this_thread::sleep_for(1ms);
  std::promise<void> big_ran;
  EXPECT_TRUE(pool.try_submit(5000, [&] { big_ran.set_value(); }));  // alone: may run
  EXPECT_EQ(big_ran.get_future().wait_for(5s), std::future_status::ready);
}

TEST(HandlerPool, StopRunsWhatIsQueuedThenRefuses) {
  std::atomic<int> ran{0};
  HandlerPool pool({1, 100, 1 << 20});
  Gate gate;
  ASSERT_TRUE(pool.try_submit(1, [&] {
    gate.wait();
    ++ran;
  }));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.try_submit(1, [&] { ++ran; }));
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open.set_value();
  });
  pool.stop();
  opener.join();
  EXPECT_EQ(ran.load(), 6);
  EXPECT_FALSE(pool.try_submit(1, [] {}));
}

TEST(HandlerPool, AThrowingTaskDoesNotStopThePool) {
  HandlerPool pool({1, 8, 1 << 20});
  ASSERT_TRUE(pool.try_submit(1, [] { throw std::runtime_error("boom"); }));
  std::promise<void> next;
  ASSERT_TRUE(pool.try_submit(1, [&] { next.set_value(); }));
  EXPECT_EQ(next.get_future().wait_for(5s), std::future_status::ready);
}

}  // namespace
}  // namespace kvasir::server
