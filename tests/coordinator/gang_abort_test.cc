// A gang aborted while its agents are alive and registered ("a child whose gang was
// aborted stops writing"), with every real process on loopback (the services and two
// `mlcd-worker agent` slots training a tiny ViT over Gloo):
//   - the job is cancelled mid-epoch: both children are told ABORT;
//   - one member's training child is SIGKILLed mid-epoch: its agent reports the failure, the
//     coordinator aborts the gang, the survivor is told ABORT.
// Either way no checkpoint appears in the job's checkpoint root after the abort (a SIGTERM
// used to make the children agree to stop, then write and prune one more), and the
// checkpoint the coordinator committed last is still there. And with --keep-checkpoints 1,
// the children never prune the checkpoint the coordinator committed last (the agents'
// committed_checkpoint files name it), not even while both agents are frozen and their gang
// is aborted for silence; the job resumes from it.
#include <dirent.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

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

// (round, epoch, step in epoch) of a checkpoint name "ckpt-r<R>-e<E>-s<S>"; false otherwise.
bool Position(const std::string& name, std::tuple<int, int, long long>* position) {
  int r = 0, e = 0;
  long long st = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "ckpt-r%d-e%d-s%lld%c", &r, &e, &st, &tail) != 3) return false;
  *position = {r, e, st};
  return true;
}

// What the agents' committed_checkpoint files hold (one per TRAIN assignment they ran).
std::set<std::string> CommitMarkers(TestCluster& cluster) {
  std::set<std::string> out;
  for (int w = 0; w < 2; ++w) {
    const std::string dir = cluster.WorkerDataDir(w) + "/assignments";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      auto text = ReadFileToString(dir + "/" + e->d_name + "/committed_checkpoint");
      if (text.ok()) out.insert(text->substr(0, text->find('\n')));
    }
    ::closedir(d);
  }
  return out;
}

// The coordinator tells the agents which checkpoint it committed last
// (HeartbeatResponse.committed_checkpoint), the agents keep it in the assignment's
// committed_checkpoint file, and the train children (here with --keep-checkpoints 1 through
// MLCD_KEEP_CHECKPOINTS) never prune it nor a newer one. Before, a child pruned the commit as
// soon as it wrote a newer checkpoint, so the committed one was gone whenever the coordinator
// lagged; an aborted gang's child, still training until its agent's next heartbeat, could
// thus leave the job restarting from a checkpoint that did not exist.
class CommittedCheckpointTest : public GangAbortTest {
 protected:
  std::vector<std::string> WorkerEnv() const override { return {"MLCD_KEEP_CHECKPOINTS=1"}; }
};

TEST_F(CommittedCheckpointTest, ChildrenNeverPruneTheCommittedCheckpoint) {
  TinyJob spec = Spec();
  spec.checkpoint_every_steps = 4;
  spec.heartbeat_timeout = 4;
  spec.max_restarts = 2;
  // The children read their labels through their agent's label gateway, which a stopped agent
  // does not answer: labels prefetched far enough ahead keep them training, and writing
  // checkpoints, while both agents are stopped (part 2).
  spec.label_prefetch_depth = 96;
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  auto committed_now = [&]() -> std::string {
    auto job = cluster_->Get(id);
    return job.ok() && job->rounds_size() > 0 ? job->rounds(0).checkpoint() : "";
  };

  // 1. While training, whenever the coordinator's record names a commit (the same one before
  // and after the look), that checkpoint exists; and an agent's file names it.
  int checked = 0;
  bool marker_matched = false;
  const auto phase1_end = std::chrono::steady_clock::now() + seconds(120);
  while ((checked < 30 || !marker_matched) && std::chrono::steady_clock::now() < phase1_end) {
    const std::string before = committed_now();
    if (before.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const bool exists = PathExists(before + "/meta.json");
    const bool in_marker = CommitMarkers(*cluster_).count(before) > 0;
    if (committed_now() != before) continue;  // a newer commit meanwhile: look again
    ++checked;
    ASSERT_TRUE(exists) << "the committed checkpoint was pruned: " << before;
    marker_matched = marker_matched || in_marker;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(marker_matched) << "no agent's committed_checkpoint file named the commit; files: "
                              << ::testing::PrintToString(CommitMarkers(*cluster_));
  ASSERT_GE(checked, 30) << "the job committed too late to look 30 times";
  auto job = cluster_->Get(id);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->state(), v1::JOB_STATE_TRAINING) << "the job ended before the agents were stopped";

  // 2. Both agents stop (SIGSTOP): their children train on, writing checkpoints that nobody
  // commits, and the coordinator aborts the silent gang after heartbeat_timeout. The commit
  // stays; the checkpoints after it stay too (disk use beyond --keep-checkpoints).
  struct Resume {  // SIGCONT on every way out, so the cluster can be torn down
    TestCluster* cluster;
    ~Resume() {
      for (int w = 0; w < 2; ++w) ::kill(cluster->worker(w).pid(), SIGCONT);
    }
  } resume{cluster_.get()};
  for (int w = 0; w < 2; ++w) ASSERT_EQ(::kill(cluster_->worker(w).pid(), SIGSTOP), 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // heartbeats in flight land
  const std::string committed = committed_now();
  ASSERT_FALSE(committed.empty());
  const std::string root = committed.substr(0, committed.rfind('/'));
  const std::string committed_name = committed.substr(committed.rfind('/') + 1);
  std::tuple<int, int, long long> committed_position;
  ASSERT_TRUE(Position(committed_name, &committed_position)) << committed;
  auto newer_than_commit = [&] {
    int n = 0;
    for (const auto& name : Checkpoints(root)) {
      std::tuple<int, int, long long> position;
      n += Position(name, &position) && committed_position < position;
    }
    return n;
  };
  const auto frozen_end = stopped_at + seconds(30);
  while ((newer_than_commit() < 3 ||
          std::chrono::steady_clock::now() < stopped_at + seconds(spec.heartbeat_timeout + 2)) &&
         std::chrono::steady_clock::now() < frozen_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int newer = newer_than_commit();
  const bool still_there = PathExists(committed + "/meta.json");
  const std::string committed_after = committed_now();
  for (int w = 0; w < 2; ++w) ::kill(cluster_->worker(w).pid(), SIGCONT);
  EXPECT_TRUE(still_there) << "the committed checkpoint was pruned: " << committed
                           << "; left: " << ::testing::PrintToString(Checkpoints(root));
  EXPECT_EQ(committed_after, committed) << "a commit while both agents were stopped";
  EXPECT_GE(newer, 3) << ::testing::PrintToString(Checkpoints(root));

  // 3. The agents hear ABORT, the gang is formed again from the commit, and the job finishes.
  job = cluster_->WaitForJob(
      id, [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(300));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  auto history = cluster_->Get(id, /*history=*/true);
  ASSERT_TRUE(history.ok());
  bool aborted = false, resumed_from_commit = false;
  for (const auto& h : history->history()) {
    aborted = aborted || h.kind() == "gang_aborted";
    if (aborted && h.kind() == "gang_started")
      resumed_from_commit = resumed_from_commit || h.checkpoint() == committed;
  }
  EXPECT_TRUE(aborted) << "the silent gang was not aborted";
  EXPECT_TRUE(resumed_from_commit) << "no gang resumed from " << committed;
}

}  // namespace
}  // namespace mlcd::testing
