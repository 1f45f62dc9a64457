// The owner marker of a checkpoint root (common/checkpoint_owner.h): claimed once, by exactly
// one of several racing claimants, never taken over; a marker that is not one (a link, a
// directory, too long) is refused rather than followed or trusted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint_owner.h"
#include "common/file_util.h"
#include "common/limits.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

ConfinedDir Open(const std::string& path) {
  auto dir = OpenConfinedDir(path, "checkpoint_dir", /*create=*/true);
  EXPECT_TRUE(dir.ok()) << dir.status().ToString();
  return dir.ok() ? std::move(*dir) : ConfinedDir();
}

TEST(CheckpointOwnerTest, TheFirstJobClaimsTheRootAndKeepsIt) {
  TempDir tmp;
  ConfinedDir root = Open(tmp.Sub("ckpt"));
  EXPECT_EQ(*ReadCheckpointOwner(root), "");
  // A run by hand in an unclaimed root: allowed, claims nothing.
  EXPECT_TRUE(ClaimCheckpointRoot(root, "").ok());
  EXPECT_FALSE(PathExists(tmp.Sub("ckpt/OWNER")));
  ASSERT_TRUE(ClaimCheckpointRoot(root, "alpha-1").ok());
  EXPECT_EQ(*ReadFileToString(tmp.Sub("ckpt/OWNER")), "alpha-1\n");
  EXPECT_TRUE(ClaimCheckpointRoot(root, "alpha-1").ok()) << "the owner again";
  for (const std::string& other : {std::string("beta-2"), std::string()}) {
    Status st = ClaimCheckpointRoot(root, other);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("belongs to job alpha-1"), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(*ReadFileToString(tmp.Sub("ckpt/OWNER")), "alpha-1\n");
  // No temporary file is left behind.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.Sub("ckpt")))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"OWNER"});
}

TEST(CheckpointOwnerTest, OfRacingJobsExactlyOneWins) {
  TempDir tmp;
  ConfinedDir root = Open(tmp.Sub("ckpt"));
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (ClaimCheckpointRoot(root, "job-" + std::to_string(i)).ok()) ++won;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  auto owner = ReadCheckpointOwner(root);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ(owner->rfind("job-", 0), 0u) << *owner;
}

TEST(CheckpointOwnerTest, AMarkerThatIsNoMarkerIsRefused) {
  TempDir tmp;
  TempDir outside;
  ASSERT_TRUE(WriteFileAtomically(outside.Sub("victim"), "alpha-1\n").ok());
  ConfinedDir link_root = Open(tmp.Sub("link"));
  ASSERT_EQ(::symlink(outside.Sub("victim").c_str(), tmp.Sub("link/OWNER").c_str()), 0);
  ConfinedDir dir_root = Open(tmp.Sub("dir"));
  ASSERT_TRUE(MakeDirs(tmp.Sub("dir/OWNER")).ok());
  ConfinedDir long_root = Open(tmp.Sub("long"));
  ASSERT_TRUE(
      WriteFileAtomically(tmp.Sub("long/OWNER"), std::string(kMaxCheckpointOwnerBytes + 1, 'x'))
          .ok());
  for (const ConfinedDir* root : {&link_root, &dir_root, &long_root}) {
    SCOPED_TRACE(root->path());
    EXPECT_EQ(ReadCheckpointOwner(*root).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(ClaimCheckpointRoot(*root, "alpha-1").code(), StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace mlcd
