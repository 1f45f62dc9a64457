// A gang aborted while its agents are alive and registered (issue 17, "a child whose gang was
// aborted stops writing"), with every real process on loopback (the services and two
// `mlcd-worker agent` slots training a tiny ViT over Gloo):
//   - the job is cancelled mid-epoch: both children are told ABORT;
//   - one member's training child is SIGKILLed mid-epoch: its agent reports the failure, the
//     coordinator aborts the gang, the survivor is told ABORT.
// Either way no checkpoint appears in the job's checkpoint root after the abort (a SIGTERM
// used to make the children agree to stop, then write and prune one more), and the
// checkpoint the coordinator committed last is still there.
#include <dirent.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// The sealed checkpoints under a checkpoint root (names not starting with '.': a write in
// progress is a ".tmp-" directory) and what LATEST names.
std::set<std::string> Checkpoints(const std::string& root) {
  std::set<std::string> out;
  DIR* d = ::opendir(root.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || name == "LATEST") continue;
    out.insert(name);
  }
  ::closedir(d);
  auto latest = ReadFileToString(root + "/LATEST");
  if (latest.ok()) out.insert("LATEST=" + *latest);
  return out;
}

// The pid of the agent's `mlcd-worker train` child (-1 when none).
pid_t TrainChildOf(pid_t agent) {
  DIR* d = ::opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != agent) continue;
    auto cmdline = ReadFileToString("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.ok() && cmdline->find(std::string("train\0", 6)) != std::string::npos) {
      found = pid;
      break;
    }
  }
  ::closedir(d);
  return found;
}

class GangAbortTest : public TwoWorkerClusterTest {
 protected:
  // 4096 images, batch 32: 128 steps an epoch, checkpoints at epoch ends only, so the abort
  // (right after epoch 0's checkpoint is committed) comes seconds before the next one is due,
  // and the agents hear of it within a heartbeat interval (500 ms here).
  static constexpr int64_t kStepsPerEpoch = 4096 / 32;
  static TinyJob Spec() {
    TinyJob spec;
    spec.limit = 4096;
    spec.batch_size = 32;
    spec.epochs = 3;
    spec.max_steps_per_epoch = 0;
    spec.heartbeat_timeout = 6;
    spec.collective_timeout = 20;
    spec.max_restarts = 0;
    return spec;
  }

  // Submits the job and waits until epoch 0's checkpoint is committed; returns the job id
  // and the committed checkpoint.
  void StartAndWaitForCommit(std::string* id, std::string* committed) {
    auto submitted = cluster_->Submit(Spec().Yaml());
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    *id = submitted->id();
    auto job = cluster_->WaitForJob(
        *id,
        [](const v1::Job& j) {
          return IsTerminal(j.state()) ||
                 (j.rounds_size() > 0 && j.rounds(0).checkpoint_global_step() >= kStepsPerEpoch);
        },
        seconds(300));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_EQ(job->state(), v1::JOB_STATE_TRAINING) << job->message();
    ASSERT_EQ(job->rounds(0).checkpoint_global_step(), kStepsPerEpoch) << job->DebugString();
    *committed = job->rounds(0).checkpoint();
    ASSERT_TRUE(IsDirectory(*committed)) << *committed;
  }

  // After the abort: both agents idle again (their children gone), no checkpoint written
  // since `before`, the committed one still there.
  void ExpectNothingWrittenAfterAbort(const std::string& root, const std::set<std::string>& before,
                                      const std::string& committed) {
    ASSERT_TRUE(cluster_->WaitForIdleWorkers(2, seconds(60)).ok()) << cluster_->Logs();
    for (int w = 0; w < 2; ++w) EXPECT_EQ(TrainChildOf(cluster_->worker(w).pid()), -1);
    const std::set<std::string> after = Checkpoints(root);
    for (const auto& name : after) {
      EXPECT_TRUE(before.count(name)) << "written after the abort: " << name;
    }
    EXPECT_TRUE(IsDirectory(committed)) << "the committed checkpoint was pruned: " << committed;
    EXPECT_TRUE(PathExists(committed + "/meta.json")) << committed;
  }
};

TEST_F(GangAbortTest, CancelledJobsChildrenWriteNoFurtherCheckpoint) {
  std::string id, committed;
  ASSERT_NO_FATAL_FAILURE(StartAndWaitForCommit(&id, &committed));
  const std::string root = committed.substr(0, committed.rfind('/'));
  const std::set<std::string> before = Checkpoints(root);
  ASSERT_FALSE(before.empty());

  ASSERT_TRUE(cluster_->Cancel(id).ok());
  auto job = cluster_->WaitForState(id, v1::JOB_STATE_CANCELLED, seconds(30));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED) << job->message();
  ASSERT_NO_FATAL_FAILURE(ExpectNothingWrittenAfterAbort(root, before, committed));
  // Neither child announced a stop at a checkpoint: they were killed, not asked to stop.
  for (int w = 0; w < 2; ++w) {
    for (const auto& [assignment, events] : ProgressEvents(cluster_->WorkerDataDir(w))) {
      for (const auto& e : events) {
        EXPECT_NE(e.value("event", ""), "stopped") << "worker " << w << ": " << e.dump();
      }
    }
  }
}

TEST_F(GangAbortTest, SurvivorOfAKilledMemberWritesNoFurtherCheckpoint) {
  std::string id, committed;
  ASSERT_NO_FATAL_FAILURE(StartAndWaitForCommit(&id, &committed));
  const std::string root = committed.substr(0, committed.rfind('/'));
  const std::set<std::string> before = Checkpoints(root);

  const pid_t child = TrainChildOf(cluster_->worker(1).pid());
  ASSERT_GT(child, 0) << "no train child under agent w1";
  ASSERT_EQ(::kill(child, SIGKILL), 0);

  // The gang is aborted (max_restarts 0: the job fails with the member's failure).
  auto job = cluster_->WaitForState(id, v1::JOB_STATE_FAILED, seconds(90));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED) << job->message();
  ASSERT_NO_FATAL_FAILURE(ExpectNothingWrittenAfterAbort(root, before, committed));
  // Both agents stayed registered throughout (the abort came through heartbeats, not a
  // re-registration).
  auto workers = cluster_->Workers();
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->workers_size(), 2);
}

}  // namespace
}  // namespace mlcd::testing
