// Disk full under the label store: RocksDB runs on a file layer that, on demand
// (tests/testing/full_disk_fs.h), reports 1 MiB free and fails every write with "no space" (the
// real file system underneath), so the test is deterministic and needs no mount. Before: a failed write left
// the store failing writes until restarted while health said SERVING. Now writes are refused
// before RocksDB meets the full disk, Health() reports it (the service's health check says
// NOT_SERVING), and the store takes writes again on its own once space returns.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "common/limits.h"
#include "labelstore/storage.h"
#include "tests/testing/full_disk_fs.h"
#include "tests/testing/process.h"

namespace mlcd::labelstore {
namespace {

v1::WriteLabelsRequest Rows(uint64_t first, int n) {
  v1::WriteLabelsRequest m;
  for (int i = 0; i < n; ++i) {
    m.add_sample_ids(first + static_cast<uint64_t>(i));
    m.add_labels(static_cast<int32_t>((first + i) % 10));
    m.add_labels(static_cast<int32_t>((first + i + 1) % 10));
  }
  return m;
}

TEST(LabelStorageDiskFull, HealthFailsWhileWritesFailAndRecoversOnItsOwn) {
  testing::TempDir dir;
  auto fs = std::make_shared<testing::FullDiskFileSystem>();
  LabelStorageOptions options;
  options.data_dir = dir.Sub("db");
  options.block_cache_bytes = 8 << 20;
  options.env = testing::NewFullDiskEnv(fs);
  options.recovery_interval = std::chrono::milliseconds(50);
  auto storage = LabelStorage::Open(options);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  LabelStorage& s = **storage;
  v1::CreateLabelSetRequest create;
  create.set_name("full/r0");
  create.set_num_classes(10);
  create.set_labels_per_sample(2);
  ASSERT_TRUE(s.Create(create).ok());
  ASSERT_TRUE(s.Write("full/r0", Rows(0, 100)).ok());
  ASSERT_TRUE(s.SyncWal().ok());
  EXPECT_TRUE(s.Health().ok());

  fs->full = true;
  auto failed = s.Write("full/r0", Rows(100, 100));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("writes resume by themselves"), std::string::npos);
  EXPECT_EQ(s.Health().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.Health().message().find("resumed automatically once the disk has room"),
            std::string::npos)
      << s.Health().ToString();
  create.set_name("full/r1");
  EXPECT_EQ(s.Create(create).status().code(), StatusCode::kUnavailable);
  // Still full: several recovery attempts later the store still says so.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(s.Health().ok());
  EXPECT_FALSE(s.Write("full/r0", Rows(300, 10)).ok());

  fs->full = false;  // space returns
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.Health().ok() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(s.Health().ok()) << s.Health().ToString();
  ASSERT_TRUE(s.Write("full/r0", Rows(200, 100)).ok());
  ASSERT_TRUE(s.SyncWal().ok());
  // The rows acknowledged before the failure and after the recovery are all there.
  std::vector<uint64_t> ids = {0, 99, 200, 299};
  v1::GetLabelsResponse response;
  ASSERT_TRUE(s.GetLabels("full/r0", ids.data(), ids.size(), false, &response).ok());
  ASSERT_EQ(response.labels_size(), 8);
  EXPECT_EQ(response.labels(0), 0);
  EXPECT_EQ(response.labels(2), 9);
  EXPECT_EQ(response.labels(4), 0);
  EXPECT_EQ(response.labels(6), 9);
  EXPECT_EQ(response.missing_ids_size(), 0);
  // Rows refused while full were not written.
  ids = {100};
  ASSERT_TRUE(s.GetLabels("full/r0", ids.data(), ids.size(), false, &response).ok());
  EXPECT_EQ(response.missing_ids_size(), 1);
}

// The reserve is a setting (mlcd-labelstore --min-free-mb): with the file system reporting
// 1 MiB free (writes would still work), the default 64 MiB reserve and a 2 MiB one refuse
// writes, 0 (none) and 1 MiB take them; reads go on either way.
TEST(LabelStorageDiskFull, TheReserveIsMinFreeBytes) {
  testing::TempDir dir;
  auto fs = std::make_shared<testing::FullDiskFileSystem>();
  fs->low = true;
  v1::CreateLabelSetRequest create;
  create.set_num_classes(10);
  create.set_labels_per_sample(2);
  struct Case {
    uint64_t min_free_bytes;
    bool writes;
    const char* need;
  };
  const Case cases[] = {{kLabelStoreMinFreeBytes, false, "writes need 64 MiB, --min-free-mb"},
                        {uint64_t{2} << 20, false, "writes need 2 MiB, --min-free-mb"},
                        {0, true, ""},
                        {uint64_t{1} << 20, true, ""}};
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("min_free_bytes " + std::to_string(c.min_free_bytes));
    LabelStorageOptions options;
    options.data_dir = dir.Sub("db");
    options.block_cache_bytes = 8 << 20;
    options.env = testing::NewFullDiskEnv(fs);
    options.min_free_bytes = c.min_free_bytes;
    auto storage = LabelStorage::Open(options);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    LabelStorage& s = **storage;
    const std::string name = "reserve/r" + std::to_string(n++);
    create.set_name(name);
    auto created = s.Create(create);
    EXPECT_EQ(created.ok(), c.writes) << created.status().ToString();
    auto written = s.Write(name, Rows(0, 10));
    EXPECT_EQ(written.ok(), c.writes) << written.status().ToString();
    EXPECT_EQ(s.Health().ok(), c.writes) << s.Health().ToString();
    if (!c.writes) {
      EXPECT_EQ(created.status().code(), StatusCode::kUnavailable);
      EXPECT_NE(created.status().message().find(c.need), std::string::npos)
          << created.status().message();
      EXPECT_NE(created.status().message().find("only 1 MiB free"), std::string::npos);
    }
    EXPECT_TRUE(s.List(v1::ListLabelSetsRequest()).ok());  // reads go on below the reserve
  }
}

}  // namespace
}  // namespace mlcd::labelstore
