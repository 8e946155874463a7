// ServingPump: every task is polled until it reports done, from a few threads, and new tasks
// wake an idle pump at once.
#include "server/serving_pump.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kvasir::server {
namespace {

class CountdownTask : public PumpTask {
 public:
  CountdownTask(int polls, std::atomic<int>* finished) : left_(polls), finished_(finished) {}
  Progress poll() override {
    if (--left_ > 0) return left_ % 2 ? Progress::kIdle : Progress::kBusy;
    finished_->fetch_add(1);
    return Progress::kDone;
  }

 private:
  int left_;
  std::atomic<int>* finished_;
};

TEST(ServingPump, PollsEveryTaskToCompletion) {
  std::atomic<int> finished{0};
  ServingPump pump(2);
  for (int i = 0; i < 1000; ++i) pump.add(std::make_shared<CountdownTask>(1 + i % 7, &finished));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (finished.load() < 1000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(finished.load(), 1000);
  pump.stop();
}

TEST(ServingPump, StopsWithTasksStillActive) {
  std::atomic<int> finished{0};
  ServingPump pump(1);
  pump.add(std::make_shared<CountdownTask>(1 << 30, &finished));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pump.stop();
  EXPECT_EQ(finished.load(), 0);
}

}  // namespace
}  // namespace kvasir::server
