// The decode memory budget (worker/data/decode_budget.h): reservations
// wait while others hold the budget, never exceed it together whatever the number of threads,
// and an image larger than the whole budget is refused before any pixel is decoded. With real
// images through the real decode pool.
#include "worker/data/decode_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/limits.h"
#include "common/random.h"
#include "tests/worker_data/image_testing.h"
#include "worker/data/decode_pool.h"

namespace mlcd::worker {
namespace {

using namespace std::chrono_literals;

TEST(DecodeMemoryBudget, ARequestLargerThanTheWholeBudgetIsRefusedNamingTheNumbers) {
  DecodeMemoryBudget budget(64u << 20);
  auto r = budget.Reserve(299'400'100, "a 9990 x 9990 colour png");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("a 9990 x 9990 colour png needs 299.4 MB to decode, more "
                                      "than the worker's whole decode memory budget of 67.1 MB "
                                      "(dataset.decode_memory_mb, at most the worker's "
                                      "--max-decode-memory-mb"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(budget.reserved(), 0u);
  {
    auto all = budget.Reserve(64u << 20, "all of it");
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(budget.reserved(), 64u << 20);
    DecodeMemoryBudget::Reservation moved = std::move(all).value();
    EXPECT_EQ(moved.bytes(), 64u << 20);
  }
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_EQ(budget.peak_reserved(), 64u << 20);
}

TEST(DecodeMemoryBudget, AReservationWaitsWhileOthersHoldTheBudget) {
  DecodeMemoryBudget budget(1000);
  auto held = budget.Reserve(700, "first");
  ASSERT_TRUE(held.ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto r = budget.Reserve(400, "second");
    got = r.ok();
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(got.load()) << "700 + 400 bytes were held against a budget of 1000";
  *held = DecodeMemoryBudget::Reservation();  // released
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(budget.peak_reserved(), 700u);
}

// 16 threads, each holding random sizes for a moment: what they hold together (counted here,
// independently of the class) never exceeds the budget.
TEST(DecodeMemoryBudget, ManyThreadsNeverHoldMoreThanTheBudget) {
  constexpr uint64_t kCapacity = 1 << 20;
  DecodeMemoryBudget budget(kCapacity);
  std::atomic<uint64_t> held{0}, most{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      SplitMix rng(static_cast<uint64_t>(t) + 1);
      for (int i = 0; i < 100; ++i) {
        const uint64_t bytes = 1 + rng.Next() % (kCapacity / 3);
        auto r = budget.Reserve(bytes, "sample");
        if (!r.ok()) {
          ++failures;
          continue;
        }
        const uint64_t now = held.fetch_add(bytes) + bytes;
        uint64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(100us);
        held.fetch_sub(bytes);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most.load(), kCapacity);
  EXPECT_LE(budget.peak_reserved(), kCapacity);
  EXPECT_GT(budget.peak_reserved(), kCapacity / 3) << "the threads never overlapped";
  EXPECT_EQ(budget.reserved(), 0u);
}

// The datasets a worker process opens with one decode_memory_mb share one budget.
TEST(DecodeMemoryBudget, DatasetsOfOneProcessShareTheBudgetOfTheirSize) {
  auto a = SharedDecodeMemoryBudget(32u << 20);
  auto b = SharedDecodeMemoryBudget(32u << 20);
  auto other = SharedDecodeMemoryBudget(48u << 20);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), other.get());
  EXPECT_EQ(other->capacity(), 48u << 20);
  auto held = a->Reserve(20u << 20, "one");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(b->reserved(), 20u << 20);
}

TransformParams Transform() {
  TransformParams p;
  p.image_size = 32;
  p.seed = 3;
  return p;
}

// 8 decode threads and a budget of two images: the same pixels as without a budget, and the
// budget's peak within it.
TEST(DecodeMemoryBudget, EightDecodeThreadsShareTwoImagesOfBudget) {
  std::vector<std::string> images;
  for (int i = 0; i < 48; ++i) {
    const Image img = testing::TestPattern(200, 300, 3, i);
    images.push_back(i % 2 ? testing::EncodePng(img) : testing::EncodeJpeg(img, 90));
  }
  auto run = [&](std::shared_ptr<DecodeMemoryBudget> budget) {
    DecodePoolOptions o;
    o.threads = 8;
    o.transform = Transform();
    o.memory_budget = std::move(budget);
    auto pool = DecodePool::Create(o);
    EXPECT_TRUE(pool.ok());
    std::vector<std::vector<float>> out;
    size_t next = 0;
    for (size_t i = 0; i < images.size(); ++i) {
      while (next < images.size() && (*pool)->room() > 0) {
        DecodeJob job;
        job.key = SampleKey{0, 0, static_cast<int64_t>(next)};
        job.bytes = images[next++];
        (*pool)->Submit(std::move(job));
      }
      DecodedSample s = (*pool)->Next();
      EXPECT_TRUE(s.status.ok()) << s.status.ToString();
      out.push_back(std::move(s.pixels));
    }
    return out;
  };
  const uint64_t per_image = 200 * 300 * 3;
  auto budget = std::make_shared<DecodeMemoryBudget>(2 * per_image);
  const auto unbounded = run(nullptr);
  const auto bounded = run(budget);
  EXPECT_EQ(bounded, unbounded);
  EXPECT_LE(budget->peak_reserved(), 2 * per_image);
  EXPECT_GE(budget->peak_reserved(), per_image);
  EXPECT_EQ(budget->reserved(), 0u);
}

// The bomb of the issue, made at test time: a ~100 KB PNG of 9990 x 9990 zeros passes the
// 100-megapixel cap; with a 64 MiB budget it is refused from its header, decoding nothing.
TEST(DecodeMemoryBudget, ADecompressionBombIsRefusedFromItsHeader) {
  const std::string bomb = testing::EncodeZeroPng(9990, 9990, 1);
  EXPECT_LT(bomb.size(), 400u << 10);
  DecodeMemoryBudget budget(64u << 20);
  std::vector<float> out(3 * 32 * 32);
  auto t = DecodeAndTransform(reinterpret_cast<const uint8_t*>(bomb.data()), bomb.size(),
                              Transform(), TransformMode::kTrain, SampleKey{}, out.data(), &budget);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("a 9990 x 9990 gray png needs 299.4 MB to decode"),
            std::string::npos)
      << t.status().message();
  EXPECT_EQ(budget.peak_reserved(), 0u);
}

// The budget a process uses: the spec's, lowered to the worker's ceiling and to a quarter of
// what the host has available; the numbers below are worked by hand.
DecodeBudgetInputs Inputs(int64_t spec_mb, int threads, int64_t ceiling_mb, int64_t host_mib) {
  DecodeBudgetInputs in;
  in.spec_mb = spec_mb;
  in.loader_threads = threads;
  in.ceiling_mb = ceiling_mb;
  in.host_available = host_mib < 0 ? -1 : host_mib << 20;
  return in;
}

// The spec: decode_memory_mb 2^20 (1 TiB) gets the worker's default ceiling, 4096 MiB,
// which still holds the most loader threads (256 x 16 MiB = 4096 MiB).
TEST(DecodeMemoryBudgetChoice, TheSpecCannotRaiseTheWorkersCeiling) {
  auto c = ChooseDecodeMemoryBudget(Inputs(1 << 20, 256, kDefaultMaxDecodeMemoryMb, -1));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mb, 4096);
  EXPECT_TRUE(c->lowered);
  EXPECT_EQ(c->source,
            "dataset.decode_memory_mb 1048576 lowered to the worker's --max-decode-memory-mb 4096");
  // Below both bounds the spec's own number is used; 0 is the default, 1024.
  c = ChooseDecodeMemoryBudget(Inputs(200, 8, 4096, 64 << 10));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mb, 200);
  EXPECT_FALSE(c->lowered);
  EXPECT_EQ(c->source, "dataset.decode_memory_mb 200");
  c = ChooseDecodeMemoryBudget(Inputs(0, 2, 4096, -1));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mb, 1024);
  EXPECT_FALSE(c->lowered);
}

// 2 GiB available: a quarter is 512 MiB, below the default 1024 and the ceiling 4096. 2050 MiB:
// 512 (2050 / 4 = 512.5, rounded down).
TEST(DecodeMemoryBudgetChoice, TheHostsAvailableMemoryLowersTheBudget) {
  auto c = ChooseDecodeMemoryBudget(Inputs(0, 8, 4096, 2048));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mb, 512);
  EXPECT_TRUE(c->lowered);
  EXPECT_EQ(c->source,
            "dataset.decode_memory_mb 1024 lowered to 1/4 of the 2048 MiB this host has available");
  c = ChooseDecodeMemoryBudget(Inputs(0, 8, 4096, 2050));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mb, 512);
  // The ceiling 300 is lower than the host's share 512: the ceiling is named.
  c = ChooseDecodeMemoryBudget(Inputs(0, 8, 300, 2048));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mb, 300);
  EXPECT_NE(c->source.find("--max-decode-memory-mb 300"), std::string::npos) << c->source;
}

// 8 threads need 8 x 16 = 128 MiB; a ceiling of 64 holds 4 of them.
TEST(DecodeMemoryBudgetChoice, ABudgetTooSmallForTheLoaderThreadsIsRefusedWithTheNumbers) {
  auto c = ChooseDecodeMemoryBudget(Inputs(1024, 8, 64, -1));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "dataset.loader_threads 8 need 8 x 16 MiB = 128 MiB of decode memory, but this "
            "worker's decode budget is 64 MiB (dataset.decode_memory_mb 1024 lowered to the "
            "worker's --max-decode-memory-mb 64); use at most 4 loader threads, or raise "
            "--max-decode-memory-mb on the worker agent");
  // 40 MiB available: a quarter is 10 MiB, less than one thread's 16.
  c = ChooseDecodeMemoryBudget(Inputs(0, 1, 4096, 40));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "dataset.loader_threads 1 need 1 x 16 MiB = 16 MiB of decode memory, but this "
            "worker's decode budget is 10 MiB (dataset.decode_memory_mb 1024 lowered to 1/4 of "
            "the 40 MiB this host has available); no loader thread fits; free memory on this "
            "host");
  // Exactly enough passes: 8 x 16 = 128.
  EXPECT_TRUE(ChooseDecodeMemoryBudget(Inputs(1024, 8, 128, -1)).ok());
}

// The process's ceiling (--max-decode-memory-mb) is what ChooseProcessDecodeMemoryBudget uses.
TEST(DecodeMemoryBudgetChoice, TheProcessCeilingBoundsEveryDataset) {
  EXPECT_EQ(DecodeMemoryCeilingMb(), kDefaultMaxDecodeMemoryMb);
  SetDecodeMemoryCeilingMb(64);
  auto c = ChooseProcessDecodeMemoryBudget(1024, 8);
  SetDecodeMemoryCeilingMb(kDefaultMaxDecodeMemoryMb);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("--max-decode-memory-mb 64"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace mlcd::worker
