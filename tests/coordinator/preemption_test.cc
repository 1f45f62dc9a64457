// Workers that leave on purpose, with every real process on loopback (the services and two
// `mlcd-worker agent` slots training a tiny ViT over Gloo):
//   - SIGTERM to an agent mid-epoch (a preempted pod): its training child finishes the step,
//     the gang checkpoints there, the checkpoint is committed, the agent deregisters, and
//     once the slot is back the job resumes at that step, spending no restart;
//   - `mlcdctl workers drain` (DrainWorker) of a busy worker: the same stop at a checkpoint
//     through the heartbeat, the worker cordoned until the drain is undone.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The global steps (1-based: the step count after it) a worker's children trained, with
// how often each was trained, over all its assignments.
std::map<int64_t, int> StepsTrained(const std::string& worker_dir) {
  std::map<int64_t, int> steps;
  for (const auto& [assignment, events] : ProgressEvents(worker_dir)) {
    for (const auto& e : events) {
      if (e.value("event", "") == "progress") ++steps[e.value("global_step", int64_t{-1})];
    }
  }
  return steps;
}

// Waits until a worker's own progress log reaches `epoch` / `step_in_epoch`.
bool WaitForStep(const std::string& worker_dir, int epoch, int64_t step_in_epoch, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& [assignment, events] : ProgressEvents(worker_dir)) {
      for (const auto& e : events) {
        if (e.value("event", "") == "progress" && e.value("epoch", -1) == epoch &&
            e.value("step_in_epoch", int64_t{0}) >= step_in_epoch)
          return true;
      }
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

int Count(const v1::Job& job, const std::string& kind) {
  int n = 0;
  for (const auto& h : job.history()) n += h.kind() == kind;
  return n;
}

// The mid-epoch checkpoints the coordinator committed (global steps).
std::vector<int64_t> MidEpochCommits(const v1::Job& job) {
  std::vector<int64_t> steps;
  for (const auto& h : job.history()) {
    if (h.kind() == "checkpoint_committed") steps.push_back(h.global_step());
  }
  return steps;
}

bool Registered(TestCluster* cluster, const std::string& name, v1::WorkerInfo* out = nullptr) {
  auto workers = cluster->Workers();
  if (!workers.ok()) return false;
  for (const auto& w : workers->workers()) {
    if (w.worker_id() == name) {
      if (out) *out = w;
      return true;
    }
  }
  return false;
}

class PreemptionTest : public TwoWorkerClusterTest {
 protected:
  // 2048 images, batch 32: 64 steps an epoch, 3 epochs, checkpoints only at epoch ends (so
  // any mid-epoch checkpoint is the stop's).
  static TinyJob Spec() {
    TinyJob spec;
    spec.limit = 2048;
    spec.batch_size = 32;
    spec.epochs = 3;
    spec.max_steps_per_epoch = 0;
    spec.heartbeat_timeout = 6;
    spec.collective_timeout = 20;
    spec.max_restarts = 0;  // any restart would fail the job
    return spec;
  }

  // After the job: the exact step count, no restart, at most one step trained twice per
  // rank, and the stop's checkpoint (`stop_step`) the start of the next gang.
  void ExpectResumedAt(const std::string& id, int64_t stop_step) {
    const TinyJob spec = Spec();
    auto done = cluster_->WaitForState(id, v1::JOB_STATE_SUCCEEDED, seconds(300));
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    auto job = cluster_->Get(id, true);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
    EXPECT_EQ(job->progress().total_steps(), spec.TotalSteps());
    EXPECT_EQ(job->restarts(), 0);
    EXPECT_EQ(Count(*job, "epoch_committed"), spec.epochs);
    EXPECT_GE(Count(*job, "gang_started"), 2);
    int resumed_at_stop = 0;
    for (const auto& h : job->history()) {
      if (h.kind() == "gang_started" && h.global_step() == stop_step) ++resumed_at_stop;
    }
    EXPECT_EQ(resumed_at_stop, 1) << "no gang started at the stop's checkpoint " << stop_step;
    for (int w = 0; w < 2; ++w) {
      const auto steps = StepsTrained(cluster_->WorkerDataDir(w));
      int redone = 0;
      for (const auto& [step, times] : steps) {
        EXPECT_LE(times, 2) << "worker " << w << " trained global step " << step << " " << times
                            << " times";
        redone += times > 1;
      }
      EXPECT_LE(redone, 1) << "worker " << w << " redid " << redone << " steps";
    }
  }
};

TEST_F(PreemptionTest, SigtermToAnAgentMidEpochCheckpointsThereAndResumesWithoutARestart) {
  const TinyJob spec = Spec();
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  ASSERT_TRUE(WaitForStep(cluster_->WorkerDataDir(1), 1, 5, seconds(240))) << cluster_->Logs();

  cluster_->worker(1).Signal(SIGTERM);
  const int status = cluster_->worker(1).Wait(seconds(60));
  ASSERT_NE(status, -1) << "the agent did not stop within 60 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "agent wait status " << status;

  // The stop's checkpoint is committed, mid-epoch 1, with no restart spent.
  auto job = cluster_->Get(id, true);
  ASSERT_TRUE(job.ok());
  const auto commits = MidEpochCommits(*job);
  ASSERT_EQ(commits.size(), 1u) << job->DebugString();
  const int64_t per_epoch = 2048 / 32;
  const int64_t stop_step = commits[0];
  EXPECT_GT(stop_step, per_epoch + 5 - 1);
  EXPECT_LT(stop_step, 2 * per_epoch);
  EXPECT_EQ(job->rounds(0).checkpoint_global_step(), stop_step);
  EXPECT_EQ(job->restarts(), 0);
  EXPECT_EQ(job->state(), v1::JOB_STATE_TRAINING) << job->message();
  // Every rank stopped after the same step: neither trained past it.
  for (int w = 0; w < 2; ++w) {
    const auto steps = StepsTrained(cluster_->WorkerDataDir(w));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.rbegin()->first, stop_step) << "worker " << w;
  }
  // The stopped agent left: it is not registered (so it is never marked lost).
  EXPECT_FALSE(Registered(cluster_.get(), "w1"));

  // The slot comes back (a replacement pod) and the job goes on from the stop.
  ASSERT_TRUE(cluster_->StartWorker(1).ok());
  ExpectResumedAt(id, stop_step);
}

TEST_F(PreemptionTest, DrainingABusyWorkerStopsItsGangAtACheckpointAndCordonsIt) {
  const TinyJob spec = Spec();
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  ASSERT_TRUE(WaitForStep(cluster_->WorkerDataDir(0), 1, 3, seconds(240))) << cluster_->Logs();

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  v1::DrainWorkerRequest request;
  request.set_worker_id("w0");
  v1::DrainWorkerResponse response;
  ASSERT_TRUE(cluster_->stub()->DrainWorker(&context, request, &response).ok());
  EXPECT_TRUE(response.worker().cordoned());

  // The gang stops at a checkpoint; w0 stays registered, cordoned and idle.
  auto stopped = cluster_->WaitForJob(
      id, [](const v1::Job& j) { return j.progress().gang_size() == 0 || IsTerminal(j.state()); },
      seconds(60));
  ASSERT_TRUE(stopped.ok());
  auto job = cluster_->Get(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_TRAINING) << job->message();
  EXPECT_EQ(job->restarts(), 0);
  // The drain reaches the gang with w0's next heartbeat, so the stop may fall on an epoch
  // end (whose checkpoint it reuses) or mid-epoch (a checkpoint of its own, committed):
  // either way every rank stopped after the step the committed checkpoint holds.
  const int64_t stop_step = job->rounds(0).checkpoint_global_step();
  const auto commits = MidEpochCommits(*job);
  ASSERT_LE(commits.size(), 1u) << job->DebugString();
  if (!commits.empty()) {
    EXPECT_EQ(commits[0], stop_step);
  }
  for (int w = 0; w < 2; ++w) {
    const auto steps = StepsTrained(cluster_->WorkerDataDir(w));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.rbegin()->first, stop_step) << "worker " << w;
  }
  v1::WorkerInfo w0;
  ASSERT_TRUE(Registered(cluster_.get(), "w0", &w0));
  EXPECT_TRUE(w0.cordoned());
  // No gang forms while w0 is cordoned (the job needs both workers).
  std::this_thread::sleep_for(seconds(3));
  job = cluster_->Get(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->progress().gang_size(), 0);

  grpc::ClientContext undo_context;
  undo_context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  request.set_undo(true);
  ASSERT_TRUE(cluster_->stub()->DrainWorker(&undo_context, request, &response).ok());
  EXPECT_FALSE(response.worker().cordoned());
  ExpectResumedAt(id, stop_step);
}

TEST_F(PreemptionTest, DrainAndDeregisterCheckTheirInput) {
  v1::DrainWorkerRequest drain;
  drain.set_worker_id("nobody");
  v1::DrainWorkerResponse drained;
  grpc::ClientContext c1;
  EXPECT_EQ(cluster_->stub()->DrainWorker(&c1, drain, &drained).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::DeregisterWorkerRequest leave;
  v1::DeregisterWorkerResponse left;
  grpc::ClientContext c2;
  EXPECT_EQ(cluster_->stub()->DeregisterWorker(&c2, leave, &left).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Unknown ids are fine (a retried leave).
  leave.set_worker_id("nobody");
  grpc::ClientContext c3;
  EXPECT_TRUE(cluster_->stub()->DeregisterWorker(&c3, leave, &left).ok());
}

}  // namespace
}  // namespace mlcd::testing
