// The decode pool (worker/data/decode_pool.h) with real threads and real images: results in
// submission order whatever the completion order, equal to a single-threaded decode, bad
// samples delivered as errors in their place, the in-flight bound, destinations written in
// place, and Stop() releasing blocked callers.
#include "worker/data/decode_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/random.h"
#include "tests/worker_data/image_testing.h"

namespace mlcd::worker {
namespace {

using namespace std::chrono_literals;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::EncodeWebp;
using testing::TestPattern;

TransformParams SmallTransform() {
  TransformParams p;
  p.image_size = 32;
  p.seed = 7;
  return p;
}

// Sample i: a JPEG, PNG or WebP of its own pattern; every 7th is bad in one of four ways.
struct Corpus {
  std::vector<std::string> bytes;
  std::vector<StatusCode> expected;  // kOk or the error's code
};

Corpus MakeCorpus(int n) {
  Corpus c;
  for (int i = 0; i < n; ++i) {
    const Image img = TestPattern(40 + i % 9, 50 + i % 13, i % 4 == 0 ? 1 : 3, i);
    std::string b = i % 3 == 0   ? EncodeJpeg(img, 90)
                    : i % 3 == 1 ? EncodePng(img)
                                 : EncodeWebp(img, true);
    StatusCode code = StatusCode::kOk;
    if (i % 7 == 3) {
      switch ((i / 7) % 3) {
        case 0:
          b.resize(b.size() / 2), code = StatusCode::kDataLoss;
          break;
        case 1:
          b.clear(), code = StatusCode::kDataLoss;
          break;
        default:
          b = "GIF89a not really", code = StatusCode::kInvalidArgument;
      }
    }
    c.bytes.push_back(std::move(b));
    c.expected.push_back(code);
  }
  return c;
}

TEST(DecodePool, DeliversInOrderWithErrorsInPlaceAndMatchesOneThread) {
  const int n = 84;
  const Corpus corpus = MakeCorpus(n);
  DecodePoolOptions options;
  options.threads = 4;
  options.max_in_flight = 6;
  options.transform = SmallTransform();
  auto pool = DecodePool::Create(options);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  std::atomic<int> fetch_failures{0};
  std::thread producer([&] {
    for (int i = 0; i < n; ++i) {
      DecodeJob job;
      job.key = SampleKey{0, 2, i};
      if (i % 2 == 0) {
        job.bytes = corpus.bytes[i];
        if (job.bytes.empty()) job.fetch = [] { return StatusOr<std::string>(std::string()); };
      } else {
        // Fetches that sleep a random time scramble the completion order; sample 5 cannot
        // be read at all.
        job.fetch = [&, i]() -> StatusOr<std::string> {
          SplitMix rng(static_cast<uint64_t>(i));
          std::this_thread::sleep_for(std::chrono::microseconds(rng.Below(3000)));
          if (i == 5) {
            fetch_failures.fetch_add(1);
            return Status::NotFound("shard 00005.tar is gone");
          }
          return corpus.bytes[i];
        };
      }
      ASSERT_TRUE((*pool)->Submit(std::move(job)));
    }
  });
  const size_t floats = 3 * 32 * 32;
  for (int i = 0; i < n; ++i) {
    DecodedSample s = (*pool)->Next();
    ASSERT_EQ(s.sample_id, i);
    if (i == 5) {
      EXPECT_EQ(s.status.code(), StatusCode::kNotFound);
      EXPECT_NE(s.status.message().find("00005.tar"), std::string::npos);
      continue;
    }
    ASSERT_EQ(s.status.code(), corpus.expected[i]) << i << ": " << s.status.ToString();
    if (!s.status.ok()) {
      EXPECT_TRUE(s.pixels.empty());
      continue;
    }
    std::vector<float> reference(floats);
    ASSERT_TRUE(DecodeAndTransform(reinterpret_cast<const uint8_t*>(corpus.bytes[i].data()),
                                   corpus.bytes[i].size(), options.transform, TransformMode::kTrain,
                                   SampleKey{0, 2, i}, reference.data())
                    .ok());
    ASSERT_EQ(s.pixels, reference) << "sample " << i;
  }
  producer.join();
  (*pool)->Close();
  EXPECT_EQ((*pool)->Next().status.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(fetch_failures.load(), 1);
  EXPECT_EQ((*pool)->pending(), 0);
}

TEST(DecodePool, NeverHoldsMoreThanMaxInFlightAndWritesDestinations) {
  DecodePoolOptions options;
  options.threads = 3;
  options.max_in_flight = 2;
  options.transform = SmallTransform();
  options.mode = TransformMode::kEval;
  auto pool = DecodePool::Create(options);
  ASSERT_TRUE(pool.ok());
  const std::string png = EncodePng(TestPattern(50, 60, 3, 1));
  std::atomic<int> fetching{0}, most{0};
  const int n = 30;
  std::vector<float> batch(static_cast<size_t>(n) * 3 * 32 * 32, -100.f);
  // One thread submits and takes, the way a batch loader does: Submit only with room.
  int submitted = 0;
  for (int taken = 0; taken < n; ++taken) {
    while (submitted < n && (*pool)->room() > 0) {
      DecodeJob job;
      job.key.id = submitted;
      job.destination = batch.data() + static_cast<size_t>(submitted) * 3 * 32 * 32;
      job.fetch = [&]() -> StatusOr<std::string> {
        const int now = fetching.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(1ms);
        fetching.fetch_sub(1);
        return png;
      };
      ASSERT_TRUE((*pool)->Submit(std::move(job)));
      ++submitted;
    }
    ASSERT_LE((*pool)->pending(), 2);
    DecodedSample s = (*pool)->Next();
    ASSERT_TRUE(s.status.ok()) << s.status.ToString();
    EXPECT_EQ(s.sample_id, taken);
    EXPECT_TRUE(s.pixels.empty());  // written into the destination instead
  }
  EXPECT_LE(most.load(), 2);
  // Eval has no randomness: every image is the same, and every destination was written.
  const size_t floats = 3 * 32 * 32;
  for (int i = 1; i < n; ++i)
    ASSERT_TRUE(std::equal(batch.begin(), batch.begin() + floats, batch.begin() + i * floats));
  EXPECT_NE(batch[0], -100.f);
}

TEST(DecodePool, CloseAndStopReleaseWaitingCallers) {
  DecodePoolOptions options;
  options.threads = 1;
  options.max_in_flight = 1;
  options.transform = SmallTransform();
  {
    auto closed = DecodePool::Create(options);
    ASSERT_TRUE(closed.ok());
    std::thread closer([&] {
      std::this_thread::sleep_for(20ms);
      (*closed)->Close();
    });
    EXPECT_EQ((*closed)->Next().status.code(), StatusCode::kOutOfRange);  // waited for Close
    closer.join();
    EXPECT_FALSE((*closed)->Submit(DecodeJob{}));
  }
  auto pool = DecodePool::Create(options);
  ASSERT_TRUE(pool.ok());

  std::atomic<bool> release{false};
  DecodeJob slow;
  slow.fetch = [&]() -> StatusOr<std::string> {
    while (!release.load()) std::this_thread::sleep_for(1ms);
    return Status::NotFound("never mind");
  };
  ASSERT_TRUE((*pool)->Submit(std::move(slow)));
  EXPECT_EQ((*pool)->room(), 0);
  std::atomic<bool> submit_returned{false}, submit_result{true};
  std::thread blocked([&] {
    DecodeJob job;
    job.bytes = "x";
    submit_result = (*pool)->Submit(std::move(job));
    submit_returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(submit_returned.load());  // the pool is full
  (*pool)->Stop();
  blocked.join();
  EXPECT_FALSE(submit_result.load());
  EXPECT_EQ((*pool)->Next().status.code(), StatusCode::kCancelled);
  release = true;  // the thread finishes its sample; the destructor joins it
}

TEST(DecodePool, BadOptionsAreInvalidArgument) {
  DecodePoolOptions options;
  options.threads = 0;
  EXPECT_EQ(DecodePool::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.threads = 2;
  options.max_in_flight = -1;
  EXPECT_EQ(DecodePool::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.max_in_flight = 0;
  options.transform.image_size = -3;
  EXPECT_EQ(DecodePool::Create(options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
