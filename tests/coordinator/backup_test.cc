// Backup and restore of the coordinator's state with every real process on loopback:
// `mlcdctl admin backup --out DIR` while a job trains, then the coordinator is killed, its
// database replaced by the backup (a fresh RocksDB from DIR, as on a new volume), and the
// restored coordinator carries the job to the end with the exact step count.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "tests/coordinator/harness.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// Runs mlcdctl against the cluster's coordinator; returns its exit status (-1: timeout).
int RunMlcdctl(TestCluster* cluster, const TempDir& dir, const std::vector<std::string>& args,
               std::string* log) {
  ChildProcess p;
  std::vector<std::string> all = {"--coordinator", cluster->coordinator_address()};
  all.insert(all.end(), args.begin(), args.end());
  const std::string log_path = dir.path() + "/mlcdctl.log";
  if (!p.Start(BinPath("mlcdctl"), all, log_path).ok()) return -1;
  const int status = p.Wait(seconds(60));
  *log = p.Log();
  return status < 0 ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}

TEST(CoordinatorBackupTest, BackupDuringAJobRestoresIntoAFreshDatabaseAndTheJobFinishes) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_TRUE(cluster.StartServicesAndWorkers(2).ok()) << cluster.Logs();

  TinyJob spec;
  spec.limit = 2048;
  spec.batch_size = 32;
  spec.epochs = 3;
  spec.max_steps_per_epoch = 0;
  spec.heartbeat_timeout = 10;
  spec.collective_timeout = 20;
  auto submitted = cluster.Submit(spec.Yaml(), "backup-test-request");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  auto mid = cluster.WaitForJob(
      id,
      [](const v1::Job& j) {
        return (j.rounds_size() && j.rounds(0).epochs_committed() >= 1) || IsTerminal(j.state());
      },
      seconds(240));
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  ASSERT_EQ(mid->state(), v1::JOB_STATE_TRAINING);

  // The backup, taken online while the gang trains.
  const std::string backup = dir.path() + "/backup-1";
  std::string log;
  ASSERT_EQ(RunMlcdctl(&cluster, dir, {"admin", "backup", "--out", backup}, &log), 0) << log;
  EXPECT_NE(log.find("format version 2"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(backup + "/CURRENT")) << log;
  EXPECT_FALSE(std::filesystem::exists(backup + ".partial"));
  // A second backup never overwrites the first.
  EXPECT_EQ(RunMlcdctl(&cluster, dir, {"admin", "backup", "--out", backup}, &log), 4) << log;
  // The coordinator's temporary checkpoint is gone again.
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(cluster.coordinator_data_dir() + "/backups", ec)) << ec;

  // Disaster: the coordinator and its database are gone; a fresh one starts on the backup.
  cluster.KillCoordinator();
  const std::string db = cluster.coordinator_data_dir() + "/db";
  std::filesystem::remove_all(db);
  std::filesystem::copy(backup, db, std::filesystem::copy_options::recursive);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();

  auto done = cluster.WaitForState(id, v1::JOB_STATE_SUCCEEDED, seconds(300));
  ASSERT_TRUE(done.ok()) << done.status().ToString() << cluster.Logs();
  auto job = cluster.Get(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  EXPECT_EQ(job->progress().total_steps(), spec.TotalSteps());
  int recovered = 0, committed = 0;
  for (const auto& h : job->history()) {
    recovered += h.kind() == "recovered";
    committed += h.kind() == "epoch_committed";
  }
  EXPECT_EQ(recovered, 1);
  EXPECT_EQ(committed, spec.epochs);
  // The request id survived too: resubmitting returns the same job.
  auto again = cluster.Submit(spec.Yaml(), "backup-test-request");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), id);
  if (HasFailure()) std::cerr << cluster.Logs();
}

}  // namespace
}  // namespace mlcd::testing
