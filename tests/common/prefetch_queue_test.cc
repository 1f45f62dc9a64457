// PrefetchQueue (common/prefetch_queue.h) with real threads: order and capacity between a
// producer and a consumer, Stop() releasing a producer blocked on a full queue or sleeping
// in a back-off, and the time Pop reports having waited. Runs under TSan in the sanitizer
// build (label `sanitize`).
#include "common/prefetch_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace mlcd {
namespace {

using namespace std::chrono_literals;

TEST(PrefetchQueue, DeliversEveryItemInOrderAndNeverHoldsMoreThanCapacity) {
  constexpr int kItems = 2000;
  constexpr int kCapacity = 3;
  PrefetchQueue<int> queue(kCapacity);
  std::atomic<int> pushed{0};
  std::atomic<int> popped{0};
  std::atomic<int> most_waiting{0};
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      if (!queue.WaitForRoom()) break;  // never stopped: the consumer then waits and times out
      queue.Push(i);
      const int waiting = pushed.fetch_add(1) + 1 - popped.load();
      int seen = most_waiting.load();
      while (waiting > seen && !most_waiting.compare_exchange_weak(seen, waiting)) {
      }
    }
  });
  std::vector<int> got;
  for (int i = 0; i < kItems; ++i) {
    got.push_back(queue.Pop());
    popped.fetch_add(1);
  }
  producer.join();
  ASSERT_EQ(got.size(), static_cast<size_t>(kItems));
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], i);
  // A pushed item is counted before the pop that follows it is, so the count can read one
  // above the true queue length at most.
  EXPECT_LE(most_waiting.load(), kCapacity + 1);
}

TEST(PrefetchQueue, StopReleasesAProducerWaitingForRoom) {
  PrefetchQueue<int> queue(1);
  ASSERT_TRUE(queue.WaitForRoom());
  queue.Push(7);
  std::atomic<bool> returned{false};
  bool room = true;
  std::thread producer([&] {
    room = queue.WaitForRoom();  // full: blocks until Stop()
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load());
  queue.Stop();
  producer.join();
  EXPECT_FALSE(room);
  EXPECT_EQ(queue.Pop(), 7);  // what was queued before Stop() is still delivered
}

TEST(PrefetchQueue, StopCutsABackOffShort) {
  PrefetchQueue<int> queue(2);
  bool stopped = false;
  const auto start = std::chrono::steady_clock::now();
  std::thread producer([&] { stopped = queue.SleepUnlessStopped(60s); });
  std::this_thread::sleep_for(20ms);
  queue.Stop();
  producer.join();
  EXPECT_TRUE(stopped);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_TRUE(queue.SleepUnlessStopped(1ms));  // stays stopped
}

TEST(PrefetchQueue, BackOffRunsItsCourseWithoutStop) {
  PrefetchQueue<int> queue(2);
  EXPECT_FALSE(queue.SleepUnlessStopped(5ms));
}

TEST(PrefetchQueue, PopReportsTheTimeItWaited) {
  PrefetchQueue<int> queue(1);
  std::thread producer([&] {
    std::this_thread::sleep_for(100ms);
    queue.Push(1);
  });
  double waited = -1;
  EXPECT_EQ(queue.Pop(&waited), 1);
  producer.join();
  EXPECT_GE(waited, 0.09);
  queue.Push(2);
  EXPECT_EQ(queue.Pop(&waited), 2);
  EXPECT_LT(waited, 0.09);
}

TEST(PrefetchQueue, CapacityBelowOneMeansOne) {
  PrefetchQueue<int> queue(0);
  ASSERT_TRUE(queue.WaitForRoom());
  queue.Push(1);
  std::atomic<bool> returned{false};
  std::thread producer([&] {
    queue.WaitForRoom();
    returned = true;
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(queue.Pop(), 1);
  producer.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace
}  // namespace mlcd
