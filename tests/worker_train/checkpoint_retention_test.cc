// The pruning rule of a checkpoint root (worker/train/checkpoint_retention.h) on real
// directories: names and positions, the listing order, the floor the agent's
// committed-checkpoint file sets, and what a run by hand keeps. Whole checkpoints written by
// the trainer's WriteCheckpoint are pruned in tests/worker_train/train_step_test.cc.
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/testing/process.h"
#include "worker/train/checkpoint_retention.h"

namespace mlcd::worker {
namespace {

// A sealed checkpoint directory as ListCheckpoints sees one (a meta.json inside).
void Seal(const std::string& root, const std::string& name) {
  ASSERT_TRUE(MakeDirs(root + "/" + name).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/" + name + "/meta.json", "{}\n").ok());
}

std::vector<std::string> Names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.substr(p.rfind('/') + 1));
  return out;
}

TEST(CheckpointRetentionTest, PositionsComeFromExactNames) {
  CheckpointPosition p;
  ASSERT_TRUE(ParseCheckpointPosition("/a/b/ckpt-r2-e3-s40", &p));
  EXPECT_EQ(p.round, 2);
  EXPECT_EQ(p.epoch, 3);
  EXPECT_EQ(p.step_in_epoch, 40);
  EXPECT_TRUE(ParseCheckpointPosition("ckpt-r0-e0-s1/", &p));
  for (const char* bad : {"", "LATEST", ".tmp-ckpt-r0-e0-s1", "ckpt-r0-e0-s1x", "ckpt-r-1-e0-s1",
                          "ckpt-r01-e0-s1", "ckpt-r0-e0-s+1", "ckpt-r0-e0"}) {
    EXPECT_FALSE(ParseCheckpointPosition(bad, &p)) << bad;
  }
}

TEST(CheckpointRetentionTest, ListsSealedCheckpointsByPosition) {
  ::mlcd::testing::TempDir root;
  for (const char* name : {"ckpt-r0-e1-s10", "ckpt-r0-e1-s9", "ckpt-r1-e0-s2", "ckpt-r0-e0-s64"})
    Seal(root.path(), name);
  ASSERT_TRUE(MakeDirs(root.path() + "/ckpt-r0-e2-s1").ok());  // no meta.json: not sealed
  Seal(root.path(), ".tmp-ckpt-r0-e3-s1");
  EXPECT_EQ(Names(ListCheckpoints(root.path())),
            (std::vector<std::string>{"ckpt-r0-e0-s64", "ckpt-r0-e1-s9", "ckpt-r0-e1-s10",
                                      "ckpt-r1-e0-s2"}));
  EXPECT_TRUE(ListCheckpoints(root.path() + "/missing").empty());
}

TEST(CheckpointRetentionTest, PlanKeepsTheFloorAndEverythingAfterIt) {
  const std::vector<std::string> all = {"/c/ckpt-r0-e0-s5", "/c/ckpt-r0-e0-s10",
                                        "/c/ckpt-r0-e1-s5", "/c/ckpt-r0-e1-s10",
                                        "/c/ckpt-r1-e0-s5", "/c/ckpt-r1-e0-s10"};
  CheckpointRetention keep1;
  keep1.keep_last = 1;
  // Committed: the end of round 0's epoch 1 (a path of another mount).
  PrunePlan plan = PlanPruning(all, all.back(), keep1, true, "/mnt/x/ckpt-r0-e1-s10");
  EXPECT_EQ(Names(plan.remove),
            (std::vector<std::string>{"ckpt-r0-e0-s5", "ckpt-r0-e0-s10", "ckpt-r0-e1-s5"}));
  EXPECT_EQ(plan.floor, "ckpt-r0-e1-s10");
  EXPECT_EQ(plan.after_floor, 2u);
  // keep_last 4 keeps e1-s5 (among the newest four) though it is older than the floor.
  CheckpointRetention keep4 = keep1;
  keep4.keep_last = 4;
  EXPECT_EQ(Names(PlanPruning(all, all.back(), keep4, true, "ckpt-r0-e1-s10").remove),
            (std::vector<std::string>{"ckpt-r0-e0-s5", "ckpt-r0-e0-s10"}));
  // The checkpoint resumed from stays even below the floor.
  CheckpointRetention resumed = keep1;
  resumed.resumed_from = "/c/ckpt-r0-e0-s10";
  EXPECT_EQ(Names(PlanPruning(all, all.back(), resumed, true, "ckpt-r1-e0-s5").remove),
            (std::vector<std::string>{"ckpt-r0-e0-s5", "ckpt-r0-e1-s5", "ckpt-r0-e1-s10"}));
  // The floor may be the newest: then only the newest keep_last and it stay.
  EXPECT_EQ(PlanPruning(all, all.back(), keep1, true, all.back()).remove.size(), 5u);
}

TEST(CheckpointRetentionTest, CoordinatedRunWithoutAFloorKeepsEverything) {
  const std::vector<std::string> all = {"/c/ckpt-r0-e0-s1", "/c/ckpt-r0-e0-s2", "/c/ckpt-r0-e0-s3"};
  CheckpointRetention keep1;
  keep1.keep_last = 1;
  EXPECT_TRUE(PlanPruning(all, all.back(), keep1, true, "").remove.empty());
  EXPECT_TRUE(PlanPruning(all, all.back(), keep1, true, "not-a-checkpoint").remove.empty());
  // A run by hand (not coordinated) keeps the newest and what it resumed from, as before.
  EXPECT_EQ(Names(PlanPruning(all, all.back(), keep1, false, "").remove),
            (std::vector<std::string>{"ckpt-r0-e0-s1", "ckpt-r0-e0-s2"}));
  CheckpointRetention keep_all;
  EXPECT_TRUE(PlanPruning(all, all.back(), keep_all, false, "").remove.empty());
}

TEST(CheckpointRetentionTest, CommittedFileIsReadAtEveryPrune) {
  ::mlcd::testing::TempDir dir;
  const std::string root = dir.path() + "/ckpt";
  const std::string marker = dir.path() + "/committed_checkpoint";
  auto missing = ReadCommittedCheckpointFile(marker);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(*missing, "");
  CheckpointRetention retention;
  retention.keep_last = 1;
  retention.resumed_from = root + "/ckpt-r0-e0-s2";
  retention.committed_file = marker;
  for (int s = 1; s <= 4; ++s) Seal(root, "ckpt-r0-e0-s" + std::to_string(s));
  // No file yet: the checkpoint resumed from is the floor.
  PruneCheckpoints(root, root + "/ckpt-r0-e0-s4", retention);
  EXPECT_EQ(Names(ListCheckpoints(root)),
            (std::vector<std::string>{"ckpt-r0-e0-s2", "ckpt-r0-e0-s3", "ckpt-r0-e0-s4"}));
  // The agent records a commit of s3 (one line with its path).
  ASSERT_TRUE(WriteFileAtomically(marker, root + "/ckpt-r0-e0-s3\n").ok());
  auto read = ReadCommittedCheckpointFile(marker);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, root + "/ckpt-r0-e0-s3");
  Seal(root, "ckpt-r0-e0-s5");
  Seal(root, "ckpt-r0-e0-s6");
  PruneCheckpoints(root, root + "/ckpt-r0-e0-s6", retention);
  EXPECT_EQ(Names(ListCheckpoints(root)),
            (std::vector<std::string>{"ckpt-r0-e0-s2", "ckpt-r0-e0-s3", "ckpt-r0-e0-s4",
                                      "ckpt-r0-e0-s5", "ckpt-r0-e0-s6"}));
  // A newer commit, s5: s3 and s4 go (older, beyond the newest one); s2 was resumed from.
  ASSERT_TRUE(WriteFileAtomically(marker, root + "/ckpt-r0-e0-s5\n").ok());
  PruneCheckpoints(root, root + "/ckpt-r0-e0-s6", retention);
  EXPECT_EQ(Names(ListCheckpoints(root)),
            (std::vector<std::string>{"ckpt-r0-e0-s2", "ckpt-r0-e0-s5", "ckpt-r0-e0-s6"}));
  // A committed file that cannot be read: the checkpoint resumed from is the floor again.
  ASSERT_EQ(::unlink(marker.c_str()), 0);
  ASSERT_TRUE(MakeDirs(marker).ok());
  EXPECT_FALSE(ReadCommittedCheckpointFile(marker).ok());
  Seal(root, "ckpt-r0-e0-s7");
  PruneCheckpoints(root, root + "/ckpt-r0-e0-s7", retention);
  EXPECT_EQ(ListCheckpoints(root).size(), 4u);
}

}  // namespace
}  // namespace mlcd::worker
