// The coordinator's worker protocol and failure handling, against the real mlcd-coordinator,
// mlcd-clusterd and mlcd-labelstore processes on loopback. The test itself speaks the worker
// side of mlcd.v1.Coordinator (register, poll, heartbeat, report) so it can time failures
// exactly: a member that goes silent, a failed report, a coordinator killed with -9 while a
// gang runs, a cancel. (tests/coordinator/e2e_test.cc runs the same paths with real
// `mlcd-worker agent` processes training for real.)
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "tests/coordinator/protocol_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(CoordinatorProtocolTest, GangCommitsEpochsRestartsFromCheckpointAndShrinksElastically) {
  ProtocolWorker w0(cluster_.get(), "pw0"), w1(cluster_.get(), "pw1");
  ASSERT_TRUE(w0.Register().ok());
  ASSERT_TRUE(w1.Register().ok());
  TinyJob spec;
  spec.heartbeat_timeout = 2;
  v1::Job job = SubmitAndWaitForTraining(spec);
  ASSERT_FALSE(job.id().empty());
  EXPECT_EQ(job.label_set(), "job/" + job.id() + "/r0");
  ASSERT_EQ(job.rounds_size(), 1);
  EXPECT_TRUE(job.rounds(0).clustered());
  EXPECT_TRUE(job.rounds(0).assigned());
  EXPECT_EQ(job.rounds(0).assign().num_samples(), 384u);

  // The gang: both workers get TRAIN with distinct ranks and one rendezvous address.
  auto got0 = w0.PollUntilAssigned(seconds(10));
  auto got1 = w1.PollUntilAssigned(seconds(10));
  ASSERT_TRUE(got0.ok() && got1.ok()) << cluster_->Logs();
  ASSERT_EQ(got0->kind(), v1::ASSIGNMENT_KIND_TRAIN);
  ASSERT_EQ(got1->kind(), v1::ASSIGNMENT_KIND_TRAIN);
  EXPECT_EQ(std::set<int>({got0->rank(), got1->rank()}), std::set<int>({0, 1}));
  EXPECT_EQ(got0->world_size(), 2);
  // Both workers registered host 127.0.0.1: they share its memory.
  EXPECT_EQ(got0->ranks_on_host(), 2);
  EXPECT_EQ(got1->ranks_on_host(), 2);
  EXPECT_EQ(got0->rendezvous_address(), got1->rendezvous_address());
  EXPECT_EQ(got0->rendezvous_address().rfind("127.0.0.1:", 0), 0u);
  EXPECT_NE(got0->rendezvous_address(), "127.0.0.1:0");
  EXPECT_EQ(got0->label_set(), job.label_set());
  // The round's centroids travel with the assignment (training.centre_init).
  EXPECT_EQ(got0->centroids_path(), job.rounds(0).centroids_path());
  EXPECT_TRUE(std::filesystem::exists(got0->centroids_path())) << got0->centroids_path();
  EXPECT_EQ(got0->labelstore_address(), cluster_->labelstore_address());
  EXPECT_EQ(got0->first_epoch(), 0);
  EXPECT_EQ(got0->end_epoch(), 2);
  EXPECT_TRUE(got0->resume_checkpoint().empty());
  EXPECT_EQ(got0->spec().training().batch_size(), 64);
  const bool w0_is_rank0 = got0->rank() == 0;
  ProtocolWorker& rank0 = w0_is_rank0 ? w0 : w1;
  ProtocolWorker& rank1 = w0_is_rank0 ? w1 : w0;
  const v1::Assignment a0 = w0_is_rank0 ? *got0 : *got1;
  const v1::Assignment a1 = w0_is_rank0 ? *got1 : *got0;
  const std::string first_rendezvous = a0.rendezvous_address();

  // Nothing is committed yet: heartbeats name no committed checkpoint.
  auto before_commit = rank1.Heartbeat(a1.id(), Running(2));
  ASSERT_TRUE(before_commit.ok());
  EXPECT_EQ(before_commit->committed_checkpoint(), "");

  // Rank 0 commits epoch 0; the answer to that very heartbeat names the commit (the agent
  // keeps it for its child's pruning), and so does rank 1's next one.
  auto hb = rank0.Heartbeat(a0.id(), EpochEnd(0, 0, 3, a0));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->action(), v1::WORKER_ACTION_CONTINUE);
  EXPECT_EQ(hb->committed_checkpoint(), CheckpointOf(a0, 0));
  auto hb1 = rank1.Heartbeat(a1.id(), Running(3));
  ASSERT_TRUE(hb1.ok());
  EXPECT_EQ(hb1->committed_checkpoint(), CheckpointOf(a0, 0));
  auto committed = cluster_->WaitForJob(
      job.id(), [](const v1::Job& j) { return j.rounds(0).epochs_committed() == 1; }, seconds(5));
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(committed->checkpoint(), CheckpointOf(a0, 0));
  EXPECT_EQ(committed->progress().total_steps(), 3);

  // Rank 1 goes silent: after heartbeat_timeout_seconds the gang is aborted and rank 0 is
  // told to stop.
  v1::HeartbeatResponse response;
  const auto deadline = std::chrono::steady_clock::now() + seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = rank0.Heartbeat(a0.id(), Running(4));
    ASSERT_TRUE(r.ok());
    response = *r;
    if (response.action() == v1::WORKER_ACTION_ABORT) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(response.action(), v1::WORKER_ACTION_ABORT);
  EXPECT_NE(response.reason().find("no longer active"), std::string::npos) << response.reason();
  EXPECT_EQ(response.committed_checkpoint(), "") << "an assignment no longer held";
  ASSERT_TRUE(rank0.Report(a0.id(), false, Running(4), "aborted by the coordinator").ok());
  auto aborted = cluster_->Get(job.id(), true);
  ASSERT_TRUE(aborted.ok());
  EXPECT_EQ(aborted->restarts(), 1);
  EXPECT_EQ(aborted->state(), v1::JOB_STATE_TRAINING);
  ASSERT_EQ(CountHistory(*aborted, "gang_aborted"), 1);
  for (const auto& h : aborted->history()) {
    if (h.kind() == "gang_aborted") {
      EXPECT_NE(h.message().find("sent no heartbeat"), std::string::npos) << h.message();
    }
  }

  // Only rank 0's worker comes back: after the grace period the phase restarts on 1 worker,
  // resuming from the committed checkpoint at epoch 1 with a fresh rendezvous port.
  const int port1 = PickFreePort();
  auto restarted = rank0.Poll(1, port1);
  ASSERT_TRUE(restarted.ok());
  v1::Assignment b = *restarted;
  if (b.kind() == v1::ASSIGNMENT_KIND_NONE) {
    auto again = rank0.PollUntilAssigned(seconds(15));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    b = *again;
  }
  EXPECT_EQ(b.kind(), v1::ASSIGNMENT_KIND_TRAIN);
  EXPECT_EQ(b.world_size(), 1);
  EXPECT_EQ(b.ranks_on_host(), 1);
  EXPECT_EQ(b.rank(), 0);
  EXPECT_EQ(b.first_epoch(), 1);
  EXPECT_EQ(b.end_epoch(), 2);
  EXPECT_EQ(b.resume_checkpoint(), CheckpointOf(a0, 0));
  EXPECT_EQ(b.start_global_step(), 3);
  EXPECT_NE(b.attempt_id(), a0.attempt_id());
  EXPECT_NE(b.rendezvous_address(), first_rendezvous);

  // The old assignment is dead for good.
  auto stale = rank1.Heartbeat(a1.id(), Running(5));
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->action(), v1::WORKER_ACTION_ABORT);

  // The new gang's first heartbeat names the commit it resumed from.
  auto resumed = rank0.Heartbeat(b.id(), Running(4));
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->committed_checkpoint(), CheckpointOf(a0, 0));

  // Epoch 1 ends; the gang reports; the job succeeds with every epoch committed once.
  ASSERT_TRUE(rank0.Heartbeat(b.id(), EpochEnd(0, 1, 3, b)).ok());
  ASSERT_TRUE(rank0.Report(b.id(), true, EpochEnd(0, 1, 3, b)).ok());
  auto done = cluster_->WaitForState(job.id(), v1::JOB_STATE_SUCCEEDED, seconds(10));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  EXPECT_EQ(done->progress().total_steps(), 6);
  auto final_job = cluster_->Get(job.id(), true);
  ASSERT_TRUE(final_job.ok());
  EXPECT_EQ(CountHistory(*final_job, "epoch_committed"), 2);
  EXPECT_EQ(CountHistory(*final_job, "gang_started"), 2);
  EXPECT_EQ(final_job->attempts(), 2);
  EXPECT_TRUE(final_job->rounds(0).trained());
  EXPECT_GT(final_job->phase_seconds().at("CLUSTERING"), 0);
  EXPECT_GT(final_job->phase_seconds().at("TRAINING"), 0);
  // History is ordered and covers every transition.
  std::vector<std::string> states;
  for (const auto& h : final_job->history()) {
    if (h.kind() == "state") states.push_back(v1::JobState_Name(h.state()));
  }
  EXPECT_EQ(states, (std::vector<std::string>{"JOB_STATE_CLUSTERING", "JOB_STATE_ASSIGNING",
                                              "JOB_STATE_TRAINING", "JOB_STATE_SUCCEEDED"}));
}

TEST_F(CoordinatorProtocolTest, GangSurvivesCoordinatorKill9AndReattaches) {
  ProtocolWorker w0(cluster_.get(), "pw0"), w1(cluster_.get(), "pw1");
  ASSERT_TRUE(w0.Register().ok());
  ASSERT_TRUE(w1.Register().ok());
  TinyJob spec;
  spec.heartbeat_timeout = 5;
  v1::Job job = SubmitAndWaitForTraining(spec);
  ASSERT_FALSE(job.id().empty());
  auto a0 = w0.PollUntilAssigned(seconds(10));
  auto a1 = w1.PollUntilAssigned(seconds(10));
  ASSERT_TRUE(a0.ok() && a1.ok());
  ProtocolWorker& rank0 = a0->rank() == 0 ? w0 : w1;
  ProtocolWorker& rank1 = a0->rank() == 0 ? w1 : w0;
  const v1::Assignment& r0 = a0->rank() == 0 ? *a0 : *a1;
  const v1::Assignment& r1 = a0->rank() == 0 ? *a1 : *a0;
  ASSERT_TRUE(rank0.Heartbeat(r0.id(), EpochEnd(0, 0, 3, r0)).ok());
  ASSERT_TRUE(cluster_
                  ->WaitForJob(
                      job.id(),
                      [](const v1::Job& j) { return j.rounds(0).epochs_committed() == 1; },
                      seconds(5))
                  .ok());

  cluster_->KillCoordinator();
  // While it is down the gang goes on; heartbeats fail.
  EXPECT_FALSE(rank0.Heartbeat(r0.id(), Running(4)).ok());
  ASSERT_TRUE(cluster_->StartCoordinator().ok()) << cluster_->Logs();

  // Reattached: the same assignments carry on, nobody is told to stop or re-register.
  for (int i = 0; i < 4; ++i) {
    auto h0 = rank0.Heartbeat(r0.id(), Running(4 + i));
    auto h1 = rank1.Heartbeat(r1.id(), Running(4 + i));
    ASSERT_TRUE(h0.ok() && h1.ok());
    EXPECT_EQ(h0->action(), v1::WORKER_ACTION_CONTINUE) << h0->reason();
    EXPECT_EQ(h1->action(), v1::WORKER_ACTION_CONTINUE) << h1->reason();
    std::this_thread::sleep_for(milliseconds(300));
  }
  auto recovered = cluster_->Get(job.id(), true);
  ASSERT_TRUE(recovered.ok());
  EXPECT_EQ(recovered->state(), v1::JOB_STATE_TRAINING);
  EXPECT_EQ(recovered->rounds(0).epochs_committed(), 1);
  EXPECT_EQ(CountHistory(*recovered, "recovered"), 1);

  ASSERT_TRUE(rank1.Report(r1.id(), true, Running(6)).ok());
  ASSERT_TRUE(rank0.Report(r0.id(), true, EpochEnd(0, 1, 3, r0)).ok());
  auto done = cluster_->WaitForState(job.id(), v1::JOB_STATE_SUCCEEDED, seconds(10));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  EXPECT_EQ(done->attempts(), 1);
  EXPECT_EQ(done->restarts(), 0);
  auto history = cluster_->Get(job.id(), true);
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(CountHistory(*history, "epoch_committed"), 2);
}

TEST_F(CoordinatorProtocolTest, GangLostAcrossCoordinatorRestartRestartsFromCheckpoint) {
  ProtocolWorker w0(cluster_.get(), "pw0"), w1(cluster_.get(), "pw1");
  ASSERT_TRUE(w0.Register().ok());
  ASSERT_TRUE(w1.Register().ok());
  TinyJob spec;
  spec.heartbeat_timeout = 2;
  v1::Job job = SubmitAndWaitForTraining(spec);
  ASSERT_FALSE(job.id().empty());
  auto a0 = w0.PollUntilAssigned(seconds(10));
  auto a1 = w1.PollUntilAssigned(seconds(10));
  ASSERT_TRUE(a0.ok() && a1.ok());
  ProtocolWorker& rank0 = a0->rank() == 0 ? w0 : w1;
  const v1::Assignment r0 = a0->rank() == 0 ? *a0 : *a1;
  ASSERT_TRUE(rank0.Heartbeat(r0.id(), EpochEnd(0, 0, 3, r0)).ok());
  ASSERT_TRUE(cluster_
                  ->WaitForJob(
                      job.id(),
                      [](const v1::Job& j) { return j.rounds(0).epochs_committed() == 1; },
                      seconds(5))
                  .ok());
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->StartCoordinator().ok());
  // The gang never comes back (its agents lost their children and ask for work again): the
  // phase restarts from the epoch-0 checkpoint on both workers.
  StatusOr<v1::Assignment> b0 = Status::Unknown(""), b1 = Status::Unknown("");
  std::thread t0([&] { b0 = w0.PollUntilAssigned(seconds(20)); });
  std::thread t1([&] { b1 = w1.PollUntilAssigned(seconds(20)); });
  t0.join();
  t1.join();
  ASSERT_TRUE(b0.ok() && b1.ok()) << cluster_->Logs();
  EXPECT_EQ(b0->world_size(), 2);
  EXPECT_EQ(b0->first_epoch(), 1);
  EXPECT_EQ(b0->resume_checkpoint(), CheckpointOf(r0, 0));
  auto j = cluster_->Get(job.id(), true);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->restarts(), 1);
  EXPECT_EQ(CountHistory(*j, "recovered"), 1);
  EXPECT_EQ(CountHistory(*j, "gang_aborted"), 1);
}

TEST_F(CoordinatorProtocolTest, AnEpochEndCheckpointCommitsTheEpochsItCompletes) {
  ProtocolWorker w0(cluster_.get(), "pw0");
  ASSERT_TRUE(w0.Register().ok());
  TinyJob spec;
  spec.world_size = 1;
  v1::Job job = SubmitAndWaitForTraining(spec);
  ASSERT_FALSE(job.id().empty());
  auto a = w0.PollUntilAssigned(seconds(10));
  ASSERT_TRUE(a.ok());
  // Both epochs ended between two heartbeats: only the last checkpoint is reported.
  ASSERT_TRUE(w0.Heartbeat(a->id(), EpochEnd(0, 1, 3, *a)).ok());
  ASSERT_TRUE(w0.Report(a->id(), true, EpochEnd(0, 1, 3, *a)).ok());
  auto done = cluster_->WaitForState(job.id(), v1::JOB_STATE_SUCCEEDED, seconds(10));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  auto history = cluster_->Get(job.id(), true);
  ASSERT_TRUE(history.ok());
  std::vector<int> epochs;
  for (const auto& h : history->history()) {
    if (h.kind() == "epoch_committed") epochs.push_back(h.epoch());
  }
  EXPECT_EQ(epochs, (std::vector<int>{0, 1}));
  EXPECT_EQ(history->rounds(0).epochs_committed(), 2);
}

TEST_F(CoordinatorProtocolTest, FailedReportsExhaustMaxRestarts) {
  ProtocolWorker w0(cluster_.get(), "pw0");
  ASSERT_TRUE(w0.Register().ok());
  TinyJob spec;
  spec.world_size = 1;
  spec.max_restarts = 1;
  v1::Job job = SubmitAndWaitForTraining(spec);
  ASSERT_FALSE(job.id().empty());
  for (int i = 0; i < 2; ++i) {
    auto a = w0.PollUntilAssigned(seconds(10));
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(w0.Report(a->id(), false, Running(1),
                          "mlcd-worker train exit code 1: boom " + std::to_string(i))
                    .ok());
  }
  auto failed = cluster_->WaitForState(job.id(), v1::JOB_STATE_FAILED, seconds(5));
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed->message().find("max_restarts 1"), std::string::npos) << failed->message();
  EXPECT_NE(failed->message().find("boom 1"), std::string::npos) << failed->message();
  // Nothing more to do for the worker.
  auto none = w0.Poll(1);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind(), v1::ASSIGNMENT_KIND_NONE);
}

TEST_F(CoordinatorProtocolTest, CancelAbortsTheGangAndFreesItsWorkers) {
  ProtocolWorker w0(cluster_.get(), "pw0"), w1(cluster_.get(), "pw1");
  ASSERT_TRUE(w0.Register().ok());
  ASSERT_TRUE(w1.Register().ok());
  v1::Job job = SubmitAndWaitForTraining(TinyJob());
  ASSERT_FALSE(job.id().empty());
  auto a0 = w0.PollUntilAssigned(seconds(10));
  auto a1 = w1.PollUntilAssigned(seconds(10));
  ASSERT_TRUE(a0.ok() && a1.ok());
  auto cancelled = cluster_->Cancel(job.id());
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  auto h = w0.Heartbeat(a0->id(), Running(1));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->action(), v1::WORKER_ACTION_ABORT);
  ASSERT_TRUE(w0.Report(a0->id(), false, Running(1), "aborted").ok());
  ASSERT_TRUE(w1.Report(a1->id(), false, Running(1), "aborted").ok());
  auto workers = cluster_->Workers();
  ASSERT_TRUE(workers.ok());
  for (const auto& w : workers->workers())
    EXPECT_EQ(w.state(), v1::WORKER_STATE_IDLE) << w.worker_id();
  // Cancelling again is a no-op; the job stays CANCELLED.
  auto again = cluster_->Cancel(job.id());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(again->restarts(), 0);
}

TEST_F(CoordinatorProtocolTest, SubmitIsIdempotentAcrossRestartsAndListPages) {
  TinyJob spec;
  spec.world_size = 4;  // no workers: the jobs wait in TRAINING
  auto first = cluster_->Submit(spec.Yaml(), "req-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = cluster_->Submit(spec.Yaml(), "req-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), first->id());
  // A dry run with the used request id is still a dry run: no job, and it says which job a
  // real submission would return.
  {
    grpc::ClientContext context;
    v1::SubmitJobRequest dry;
    dry.set_spec_yaml(spec.Yaml());
    dry.set_request_id("req-1");
    dry.set_dry_run(true);
    v1::Job answer;
    ASSERT_TRUE(cluster_->stub()->SubmitJob(&context, dry, &answer).ok());
    EXPECT_TRUE(answer.id().empty()) << answer.id();
    EXPECT_EQ(answer.message().rfind("dry run", 0), 0u) << answer.message();
    EXPECT_NE(answer.message().find("already names job " + first->id()), std::string::npos)
        << answer.message();
  }
  TinyJob other = spec;
  other.epochs = 3;
  auto conflict = cluster_->Submit(other.Yaml(), "req-1");
  EXPECT_EQ(conflict.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(conflict.status().message().find(first->id()), std::string::npos);
  std::vector<std::string> ids = {first->id()};
  for (int i = 0; i < 4; ++i) {
    auto j = cluster_->Submit(spec.Yaml(), "req-more-" + std::to_string(i));
    ASSERT_TRUE(j.ok());
    ids.push_back(j->id());
  }
  ASSERT_TRUE(cluster_->Cancel(ids[1]).ok());

  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->StartCoordinator().ok());
  auto after = cluster_->Submit(spec.Yaml(), "req-1");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->id(), first->id());
  auto next = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), next->id()), 0)
      << "a job id was reused after a restart";
  ids.push_back(next->id());

  // Pages of 2, newest first, covering all 6 jobs exactly once.
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_page_size(2);
    request.set_page_token(token);
    v1::ListJobsResponse response;
    ASSERT_TRUE(cluster_->stub()->ListJobs(&context, request, &response).ok());
    for (const auto& j : response.jobs()) listed.push_back(j.id());
    token = response.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  std::vector<std::string> expected(ids.rbegin(), ids.rend());
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(pages, 3);
  // State filter.
  grpc::ClientContext context;
  v1::ListJobsRequest cancelled_only;
  cancelled_only.add_states(v1::JOB_STATE_CANCELLED);
  v1::ListJobsResponse response;
  ASSERT_TRUE(cluster_->stub()->ListJobs(&context, cancelled_only, &response).ok());
  ASSERT_EQ(response.jobs_size(), 1);
  EXPECT_EQ(response.jobs(0).id(), ids[1]);
}

// Each malformed spec or request is rejected with the right code and a message naming the
// field; none of them changes any state.
}  // namespace
}  // namespace mlcd::testing
