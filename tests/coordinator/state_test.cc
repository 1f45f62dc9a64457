// The coordinator's persisted state, in process: CoordinatorStore round trips, and the
// JobManager's jobs, request ids, history and workers surviving a reopen of the same data
// dir (the scheduler is not started, so jobs stay where the test puts them).
#include <gtest/gtest.h>

#include <prometheus/registry.h>

#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "coordinator/store.h"
#include "tests/testing/process.h"

namespace mlcd::coordinator {
namespace {

const char* kSpec = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: unit}
spec:
  dataset: {limit: 256}
  clustering: {k: 8, l: 2}
  training: {world_size: 2, batch_size: 32}
  evaluation: {enabled: false}
)";

TEST(CoordinatorStore, BatchesAreAtomicAndReloaded) {
  mlcd::testing::TempDir dir;
  {
    auto store = CoordinatorStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->NextJobSeq(), 1);
    StoreBatch batch;
    v1::JobRecord record;
    record.mutable_job()->set_id("a-1");
    record.mutable_job()->set_state(v1::JOB_STATE_TRAINING);
    record.set_seq(1);
    batch.PutJob(record);
    batch.PutRequest("r1", "a-1");
    for (int i = 1; i <= 12; ++i) {
      v1::JobHistoryEntry h;
      h.set_seq(i);
      h.set_kind("k" + std::to_string(i));
      batch.AppendHistory("a-1", h);
    }
    v1::JobHistoryEntry other;
    other.set_seq(1);
    batch.AppendHistory("a-10", other);  // a prefix-sharing id must not leak into a-1's history
    v1::WorkerRecord worker;
    worker.set_worker_id("w0");
    batch.PutWorker(worker);
    batch.PutNextJobSeq(2);
    ASSERT_TRUE((*store)->Commit(&batch).ok());
    // A second open of the same directory is refused while the first holds it.
    auto second = CoordinatorStore::Open(dir.path());
    EXPECT_FALSE(second.ok());
  }
  auto store = CoordinatorStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  std::vector<v1::JobRecord> jobs;
  ASSERT_TRUE((*store)->LoadJobs(&jobs).ok());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job().state(), v1::JOB_STATE_TRAINING);
  EXPECT_EQ(*(*store)->FindRequest("r1"), "a-1");
  EXPECT_EQ((*store)->FindRequest("r2").status().code(), StatusCode::kNotFound);
  std::vector<v1::JobHistoryEntry> history;
  ASSERT_TRUE((*store)->ReadHistory("a-1", &history).ok());
  ASSERT_EQ(history.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(history[i].seq(), i + 1);  // numeric order, not lexicographic
  std::vector<v1::WorkerRecord> workers;
  ASSERT_TRUE((*store)->LoadWorkers(&workers).ok());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(*(*store)->NextJobSeq(), 2);
  StoreBatch del;
  del.DeleteWorker("w0");
  ASSERT_TRUE((*store)->Commit(&del).ok());
  workers.clear();
  ASSERT_TRUE((*store)->LoadWorkers(&workers).ok());
  EXPECT_TRUE(workers.empty());
}

class JobManagerStateTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobManager> Open() {
    JobManagerOptions options;
    options.data_dir = dir_.path();
    options.clusterd_address = "127.0.0.1:1";  // never reached: the scheduler is not started
    auto manager = JobManager::Open(options, &metrics_);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }
  v1::Job Submit(JobManager* m, const std::string& request_id) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(kSpec);
    request.set_request_id(request_id);
    auto job = m->SubmitJob(request);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : v1::Job();
  }

  mlcd::testing::TempDir dir_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
};

TEST_F(JobManagerStateTest, JobsRequestIdsHistoryAndWorkersSurviveReopen) {
  std::string a, b;
  {
    auto m = Open();
    ASSERT_TRUE(m);
    v1::Job ja = Submit(m.get(), "req-a");
    v1::Job jb = Submit(m.get(), "");
    a = ja.id();
    b = jb.id();
    EXPECT_EQ(a, "unit-1");
    EXPECT_EQ(b, "unit-2");
    EXPECT_EQ(ja.state(), v1::JOB_STATE_PENDING);
    EXPECT_EQ(ja.spec().training().epochs_per_round(), 1);  // defaults applied and stored
    v1::CancelJobRequest cancel;
    cancel.set_id(b);
    cancel.set_reason("unit test");
    auto cancelled = m->CancelJob(cancel);
    ASSERT_TRUE(cancelled.ok());
    EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
    EXPECT_EQ(cancelled->message(), "cancelled: unit test");
    // Cancelling a finished job is refused, cancelling it again is a no-op.
    EXPECT_TRUE(m->CancelJob(cancel).ok());
    v1::RegisterWorkerRequest reg;
    reg.set_name("w0");
    reg.set_host("10.0.0.5");
    reg.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    ASSERT_TRUE(m->RegisterWorker(reg).ok());
  }
  auto m = Open();
  ASSERT_TRUE(m);
  v1::GetJobRequest get;
  get.set_id(a);
  get.set_include_history(true);
  auto ja = m->GetJob(get);
  ASSERT_TRUE(ja.ok());
  EXPECT_EQ(ja->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(ja->request_id(), "req-a");
  ASSERT_GE(ja->history_size(), 2);
  EXPECT_EQ(ja->history(0).kind(), "submitted");
  EXPECT_EQ(ja->history(ja->history_size() - 1).kind(), "recovered");
  get.set_id(b);
  auto jb = m->GetJob(get);
  ASSERT_TRUE(jb.ok());
  EXPECT_EQ(jb->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_GT(jb->finished_unix_ms(), 0);
  // Finished jobs are not "recovered".
  for (const auto& h : jb->history()) EXPECT_NE(h.kind(), "recovered");
  // The request id still maps to the first job; a new job gets a new number.
  EXPECT_EQ(Submit(m.get(), "req-a").id(), a);
  EXPECT_EQ(Submit(m.get(), "").id(), "unit-3");
  // Cancelling a cancelled job again is a no-op.
  v1::CancelJobRequest cancel;
  cancel.set_id(b);
  EXPECT_TRUE(m->CancelJob(cancel).ok());
  auto workers = m->ListWorkers(v1::ListWorkersRequest());
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->workers_size(), 1);
  EXPECT_EQ(workers->workers(0).registration().host(), "10.0.0.5");
  // Listing: newest first, filter by state.
  v1::ListJobsRequest list;
  list.add_states(v1::JOB_STATE_PENDING);
  auto pending = m->ListJobs(list);
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->jobs_size(), 2);
  EXPECT_EQ(pending->jobs(0).id(), "unit-3");
  EXPECT_EQ(pending->jobs(1).id(), a);
}

TEST_F(JobManagerStateTest, DryRunAndInvalidSpecsCreateNothing) {
  auto m = Open();
  ASSERT_TRUE(m);
  v1::SubmitJobRequest dry;
  dry.set_spec_yaml(kSpec);
  dry.set_dry_run(true);
  auto job = m->SubmitJob(dry);
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(job->id().empty());
  v1::SubmitJobRequest bad;
  bad.set_spec_yaml(std::string(kSpec) + "  loss: {variant: arcface}\n");
  auto rejected = m->SubmitJob(bad);
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("spec.loss.variant: 'arcface'"), std::string::npos);
  auto list = m->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 0);
  // The next real job is number 1: nothing was consumed.
  EXPECT_EQ(Submit(m.get(), "").id(), "unit-1");
}

}  // namespace
}  // namespace mlcd::coordinator
