// The service's admission: one job at a time, FIFO waiters, RESOURCE_EXHAUSTED past the
// queue limit, waiters leave on cancel.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "clusterd/service.h"

namespace mlcd::clusterd {
namespace {

TEST(JobGate, OneAtATimeWithBoundedQueue) {
  JobGate gate(1);
  ASSERT_TRUE(gate.Acquire(nullptr, nullptr).ok());
  EXPECT_EQ(gate.running(), 1);

  std::atomic<int> position{0};
  std::atomic<bool> second_in{false};
  std::thread second([&] {
    Status st = gate.Acquire(nullptr, [&](int p) { position = p; });
    EXPECT_TRUE(st.ok());
    second_in = true;
  });
  while (gate.queued() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // The queue (1) is full: a third caller is turned away at once.
  Status third = gate.Acquire(nullptr, nullptr);
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("busy"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_in.load());
  EXPECT_EQ(position.load(), 1);
  gate.Release();
  second.join();
  EXPECT_TRUE(second_in.load());
  gate.Release();
  EXPECT_EQ(gate.running(), 0);
}

TEST(JobGate, CancelledWaiterLeavesTheQueue) {
  JobGate gate(4);
  ASSERT_TRUE(gate.Acquire(nullptr, nullptr).ok());
  std::atomic<bool> stop{false};
  Status waited;
  std::thread waiter([&] { waited = gate.Acquire([&] { return stop.load(); }, nullptr); });
  while (gate.queued() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kCancelled);
  EXPECT_EQ(gate.queued(), 0);
  gate.Release();
  EXPECT_TRUE(gate.Acquire(nullptr, nullptr).ok());
  gate.Release();
}

}  // namespace
}  // namespace mlcd::clusterd
