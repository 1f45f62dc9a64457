// The label prefetcher against a real mlcd-labelstore process: order, stall accounting (the
// store is paused with SIGSTOP), and the error for a sample without labels.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "tests/worker_train/train_testing.h"
#include "worker/train/label_prefetcher.h"

namespace mlcd::worker {
namespace {

using mlcd::testing::TempDir;

// Labels that encode the id: row of id i is (i % 97, (i * 7) % 97, (i * 13) % 97).
Status WriteEncodedSet(const std::string& address, const std::string& name, int64_t n,
                       int64_t missing_id = -1) {
  labelstore::LabelStoreClient client(address);
  labelstore::LabelSetSpec spec;
  spec.name = name;
  spec.num_classes = 97;
  spec.labels_per_sample = 3;
  MLCD_RETURN_IF_ERROR(client.CreateLabelSet(spec).status());
  std::vector<uint64_t> ids;
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < n; ++i) {
    if (i == missing_id) continue;
    ids.push_back(static_cast<uint64_t>(i));
    rows.push_back(static_cast<int32_t>(i % 97));
    rows.push_back(static_cast<int32_t>((i * 7) % 97));
    rows.push_back(static_cast<int32_t>((i * 13) % 97));
  }
  MLCD_RETURN_IF_ERROR(client.WriteLabels(name, ids.data(), ids.size(), 3, rows.data()).status());
  return client.Seal(name).status();
}

// SIGSTOP takes effect per thread; wait until every thread of `pid` is stopped ('T'), so no
// server thread still answers a request sent right after the signal.
bool AllThreadsStopped(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      auto stat = ReadFileToString(task.path().string() + "/stat");
      if (!stat.ok()) continue;
      const size_t paren = stat->rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat->size() || (*stat)[paren + 2] != 'T')
        all = false;
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status st = store_.Start(dir_);
    ASSERT_TRUE(st.ok()) << st.ToString() << store_.process().Log();
    client_ = std::make_unique<labelstore::LabelStoreClient>(store_.address());
  }
  LabelPrefetcherOptions Options(const std::string& set, int depth) {
    LabelPrefetcherOptions o;
    o.client = client_.get();
    o.label_set = set;
    o.labels_per_sample = 3;
    o.schedule.seed = 17;
    o.schedule.num_samples = 300;
    o.schedule.global_batch_size = 24;
    o.schedule.end_epoch = 2;
    o.schedule.world_size = 3;
    o.schedule.rank = 2;
    o.depth = depth;
    return o;
  }

  TempDir dir_;
  train_testing::LabelStoreProcess store_;
  std::unique_ptr<labelstore::LabelStoreClient> client_;
};

TEST_F(PrefetcherTest, DeliversEveryBatchInScheduleOrder) {
  ASSERT_TRUE(WriteEncodedSet(store_.address(), "t/r0", 300).ok());
  LabelPrefetcherOptions o = Options("t/r0", 2);
  LabelPrefetcher prefetcher(o);
  BatchSchedule schedule(o.schedule);
  ASSERT_EQ(prefetcher.num_batches(), 24);
  for (int64_t i = 0; i < 24; ++i) {
    auto b = prefetcher.Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::vector<int64_t> ids;
    schedule.LocalIds(i, &ids);
    ASSERT_EQ(b->ids, ids);
    ASSERT_EQ(b->labels.size(), ids.size() * 3);
    for (size_t r = 0; r < ids.size(); ++r) {
      EXPECT_EQ(b->labels[r * 3], ids[r] % 97);
      EXPECT_EQ(b->labels[r * 3 + 1], (ids[r] * 7) % 97);
      EXPECT_EQ(b->labels[r * 3 + 2], (ids[r] * 13) % 97);
    }
  }
  EXPECT_EQ(prefetcher.Next().status().code(), StatusCode::kOutOfRange);
}

TEST_F(PrefetcherTest, PrefetchedBatchesDoNotStallAndAStoreOutageIsMeasured) {
  ASSERT_TRUE(WriteEncodedSet(store_.address(), "t/r0", 300).ok());
  LabelPrefetcher prefetcher(Options("t/r0", 3));
  // Let the background thread fill its 3 slots, then freeze the label store.
  auto first = prefetcher.Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  store_.process().Signal(SIGSTOP);
  ASSERT_TRUE(AllThreadsStopped(store_.process().pid())) << "the label store did not stop";
  // The 3 batches already fetched come without waiting on the (frozen) store.
  for (int i = 0; i < 3; ++i) {
    auto b = prefetcher.Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_LT(prefetcher.last_wait_seconds(), 0.25) << "batch " << i + 1 << " was not prefetched";
  }
  const double before = prefetcher.total_wait_seconds();
  // The next one needs the store: resume it after 0.8 s; the wait is measured.
  std::thread resume([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    store_.process().Signal(SIGCONT);
  });
  auto b = prefetcher.Next();
  resume.join();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GE(prefetcher.last_wait_seconds(), 0.7);
  EXPECT_GE(prefetcher.total_wait_seconds() - before, 0.7);
}

TEST_F(PrefetcherTest, MissingLabelsNameTheSetAndTheSample) {
  ASSERT_TRUE(WriteEncodedSet(store_.address(), "t/holes", 300, /*missing_id=*/123).ok());
  LabelPrefetcherOptions o = Options("t/holes", 2);
  o.schedule.world_size = 1;
  o.schedule.rank = 0;
  LabelPrefetcher prefetcher(o);
  Status error;
  for (int64_t i = 0; i < prefetcher.num_batches(); ++i) {
    auto b = prefetcher.Next();
    if (!b.ok()) {
      error = b.status();
      break;
    }
    for (int64_t id : b->ids) ASSERT_NE(id, 123) << "sample 123 has no labels but was delivered";
  }
  ASSERT_FALSE(error.ok()) << "sample 123 is in an epoch's batches, so the prefetcher must fail";
  EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(error.message().find("t/holes"), std::string::npos) << error.ToString();
  EXPECT_NE(error.message().find("sample id 123"), std::string::npos) << error.ToString();
}

TEST_F(PrefetcherTest, UnknownSetIsNotFound) {
  LabelPrefetcherOptions o = Options("t/none", 2);
  o.retry_timeout = std::chrono::milliseconds(100);
  LabelPrefetcher prefetcher(o);
  auto b = prefetcher.Next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound) << b.status().ToString();
  EXPECT_NE(b.status().message().find("t/none"), std::string::npos);
}

}  // namespace
}  // namespace mlcd::worker
