// ServingPump: a task is polled once per ring and never on a timer, a delta pushed into a
// RequestStream reaches its task without any time-out, rings racing the pump's wait are not
// lost (the pump's wait is untimed, so a lost ring hangs and the bounded waits here fail), and
// stop() returns with tasks still active.
#include "server/serving_pump.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/request_stream.h"

namespace kvasir::server {
namespace {

using namespace std::chrono_literals;

// Waits at most `limit` for pred; a ring the pump lost shows up here as a time-out.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// Rings itself after every poll until its count runs out (a task with more to do).
class CountdownTask : public PumpTask {
 public:
  CountdownTask(int polls, std::atomic<int>* finished) : left_(polls), finished_(finished) {}
  void attach(const PumpBell& bell) override { bell_ = bell; }
  Progress poll() override {
    if (--left_ > 0) {
      bell_.ring();
      return Progress::kWaiting;
    }
    finished_->fetch_add(1);
    return Progress::kDone;
  }

 private:
  PumpBell bell_;
  int left_;
  std::atomic<int>* finished_;
};

// Drains one RequestStream the way GenerationJob does: the stream rings the pump.
class StreamTask : public PumpTask {
 public:
  explicit StreamTask(std::shared_ptr<RequestStream> s) : stream_(std::move(s)) {}
  void attach(const PumpBell& bell) override { stream_->notify_on_ready(bell.queue, bell.token); }
  Progress poll() override {
    polls.fetch_add(1);
    RequestOutput d;
    while (stream_->try_next(&d)) {
      if (d.num_output_tokens != received.load() + 1) out_of_order.store(true);
      received.fetch_add(1);
    }
    if (stream_->done()) {
      finished.store(true);
      return Progress::kDone;
    }
    return Progress::kWaiting;
  }
  std::atomic<int> polls{0};
  std::atomic<int> received{0};
  std::atomic<bool> finished{false};
  std::atomic<bool> out_of_order{false};

 private:
  std::shared_ptr<RequestStream> stream_;
};

RequestOutput delta(int n, bool finished = false) {
  RequestOutput d;
  d.num_output_tokens = n;
  d.finished = finished;
  return d;
}

TEST(ServingPump, PollsEveryTaskToCompletion) {
  std::atomic<int> finished{0};
  ServingPump pump(2);
  for (int i = 0; i < 1000; ++i) pump.add(std::make_shared<CountdownTask>(1 + i % 7, &finished));
  EXPECT_TRUE(eventually([&] { return finished.load() == 1000; }));
  pump.stop();
}

TEST(ServingPump, EachDeltaIsOnePollAndNothingPollsOnATimer) {
  auto stream = std::make_shared<RequestStream>("r", 1);
  auto task = std::make_shared<StreamTask>(stream);
  ServingPump pump(1);
  pump.add(task);
  ASSERT_TRUE(eventually([&] { return task->polls.load() == 1; }));  // add's own ring
  for (int k = 1; k <= 20; ++k) {
    stream->push(delta(k));
    ASSERT_TRUE(eventually([&] { return task->received.load() == k; })) << "delta " << k << " never arrived";
    // Exactly one poll per delta: a pump that also swept on a timer would poll more.
    EXPECT_EQ(task->polls.load(), k + 1);
  }
  const uint64_t wakeups = pump.num_wakeups();
  std::this_thread::sleep_for(30ms);  // a napping pump would sweep ~30 times here
  EXPECT_EQ(task->polls.load(), 21);
  EXPECT_EQ(pump.num_wakeups(), wakeups);
  stream->push(delta(21, true));
  ASSERT_TRUE(eventually([&] { return task->finished.load(); }));
  EXPECT_FALSE(task->out_of_order.load());
  pump.stop();
}

TEST(ServingPump, DeltasPushedBeforeAddAreNotLost) {
  auto stream = std::make_shared<RequestStream>("r", 1);
  stream->push(delta(1));
  stream->push(delta(2, true));
  auto task = std::make_shared<StreamTask>(stream);
  ServingPump pump(1);
  pump.add(task);
  EXPECT_TRUE(eventually([&] { return task->finished.load(); }));
  EXPECT_EQ(task->received.load(), 2);
}

// Producers push as fast as they can on several threads while two pump threads drain; the
// rings race every point of the pump's sweep-then-wait cycle. Every delta must arrive.
TEST(ServingPump, RingsRacingTheWaitAreNotLost) {
  constexpr int kStreams = 64;
  constexpr int kDeltas = 200;
  constexpr int kProducers = 4;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::shared_ptr<StreamTask>> tasks;
  ServingPump pump(2);
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_shared<RequestStream>("r" + std::to_string(i), 1));
    tasks.push_back(std::make_shared<StreamTask>(streams.back()));
    pump.add(tasks.back());
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 rng(static_cast<uint32_t>(p));
      for (int k = 1; k <= kDeltas; ++k) {
        for (int i = p; i < kStreams; i += kProducers) {
          streams[i]->push(delta(k, k == kDeltas));
          if (rng() % 16 == 0) std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(eventually([&] { return tasks[i]->finished.load(); })) << "stream " << i << " lost a ring";
    EXPECT_EQ(tasks[i]->received.load(), kDeltas);
    EXPECT_FALSE(tasks[i]->out_of_order.load());
  }
  pump.stop();
}

TEST(ServingPump, StopsWithTasksStillActive) {
  auto stream = std::make_shared<RequestStream>("r", 1);
  auto task = std::make_shared<StreamTask>(stream);
  ServingPump pump(1);
  pump.add(task);
  ASSERT_TRUE(eventually([&] { return task->polls.load() == 1; }));
  pump.stop();
  stream->push(delta(1));  // rings a stopped pump: nothing polls, nothing breaks
  EXPECT_EQ(task->polls.load(), 1);
  EXPECT_FALSE(task->finished.load());
}

}  // namespace
}  // namespace kvasir::server
