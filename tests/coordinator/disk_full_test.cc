// Disk full under the coordinator, on a RocksDB file layer that plays a full disk
// on demand (tests/testing/full_disk_fs.h; the real file system underneath, no mount needed).
// Before: a state change that could not be written aborted the coordinator (fail-stop, kept),
// and so did every restart while the disk stayed full. Now a restart exits with an error that
// names the data dir and says to free space; below the space reserve new jobs and workers are
// refused with UNAVAILABLE while the jobs already running go on; a write refused for lack of
// space fails its RPC and changes nothing.
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include <filesystem>

#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "tests/testing/full_disk_fs.h"
#include "tests/testing/process.h"

namespace mlcd::coordinator {
namespace {

const char* kSpec = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: disk}
spec:
  dataset: {limit: 256}
  clustering: {k: 8, l: 2}
  training: {world_size: 1, batch_size: 32}
  evaluation: {enabled: false}
)";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CoordinatorDiskFullTest : public ::testing::Test {
 protected:
  StatusOr<std::unique_ptr<JobManager>> Open(uint64_t min_free_bytes = kCoordinatorMinFreeBytes) {
    JobManagerOptions options;
    options.data_dir = data_dir_;
    options.clusterd_address = "127.0.0.1:1";  // never reached: the scheduler is not started
    options.env = testing::NewFullDiskEnv(fs_);
    options.min_free_bytes = min_free_bytes;
    return JobManager::Open(options, &metrics_);
  }
  static StatusOr<v1::Job> Submit(JobManager* m, bool dry_run = false) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(kSpec);
    request.set_dry_run(dry_run);
    return m->SubmitJob(request, "");
  }
  static StatusOr<v1::RegisterWorkerResponse> Register(JobManager* m, const std::string& name) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_host("127.0.0.1");
    request.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    return m->RegisterWorker(request, "");
  }
  // Opens the coordinator's state with room to spare, submits one job, closes it again.
  void SubmitOneJobAndClose(std::string* job_id) {
    auto m = Open();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto job = Submit(m->get());
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    *job_id = job->id();
  }
  static int NumJobs(JobManager* m) { return m->ListJobs(v1::ListJobsRequest())->jobs_size(); }
  static int NumWorkers(JobManager* m) {
    return m->ListWorkers(v1::ListWorkersRequest())->workers_size();
  }

  testing::TempDir dir_;
  std::string data_dir_ = dir_.Sub("data");
  std::shared_ptr<testing::FullDiskFileSystem> fs_ =
      std::make_shared<testing::FullDiskFileSystem>();
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
};

TEST_F(CoordinatorDiskFullTest, ARestartOnAFullDiskIsAClearErrorNotACrash) {
  std::string job_id;
  ASSERT_NO_FATAL_FAILURE(SubmitOneJobAndClose(&job_id));
  fs_->full = true;
  // The reserve check, before RocksDB is asked to recover anything.
  auto refused = Open();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  for (const char* part :
       {"only 1 MiB free", "needs at least 64 MiB", "Free space there", "nothing was changed"}) {
    EXPECT_TRUE(Contains(refused.status().message(), part))
        << part << ": " << refused.status().ToString();
  }
  EXPECT_TRUE(Contains(refused.status().message(), data_dir_ + "/db"));
  // Without a reserve RocksDB meets the full disk itself, file creation failing or (as on a
  // real disk) only writes: still an error, not an abort.
  for (bool creates_fail : {true, false}) {
    fs_->creates_fail = creates_fail;
    auto opened = Open(/*min_free_bytes=*/0);
    ASSERT_FALSE(opened.ok()) << "creates_fail " << creates_fail;
    EXPECT_EQ(opened.status().code(), StatusCode::kUnavailable) << opened.status().ToString();
    EXPECT_TRUE(Contains(opened.status().message(), "the disk is full: free space on it"))
        << opened.status().ToString();
  }
  // Space freed: the coordinator starts with its job.
  fs_->full = false;
  auto m = Open();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  v1::GetJobRequest get;
  get.set_id(job_id);
  auto job = (*m)->GetJob(get);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING);
}

// RocksDB opens (its small files fit) but no state write does: the reload of an unfinished
// job cannot record itself. This used to abort (the fail-stop of a running coordinator); at
// start-up nothing was acted on yet, so it is an error and the data is untouched.
TEST_F(CoordinatorDiskFullTest, AReloadThatCannotBeRecordedIsAnErrorAndLosesNothing) {
  std::string job_id;
  ASSERT_NO_FATAL_FAILURE(SubmitOneJobAndClose(&job_id));
  fs_->only_suffix = ".log";  // the WAL
  fs_->creates_fail = false;
  fs_->full = true;
  auto failed = Open(/*min_free_bytes=*/0);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status().ToString();
  EXPECT_TRUE(Contains(failed.status().message(), "cannot record the recovery of job " + job_id))
      << failed.status().ToString();
  EXPECT_TRUE(Contains(failed.status().message(), "free space")) << failed.status().ToString();
  // That database stays open in this process (RocksDB cannot close a WAL whose write
  // failed), so check a copy of its files: the job is there as it was.
  const std::string copy = dir_.Sub("copy");
  std::filesystem::copy(data_dir_ + "/db", copy, std::filesystem::copy_options::recursive);
  auto store = CoordinatorStore::Open(copy);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<v1::JobRecord> jobs;
  ASSERT_TRUE((*store)->LoadJobs(&jobs).ok());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job().id(), job_id);
  EXPECT_EQ(jobs[0].job().state(), v1::JOB_STATE_PENDING);
}

TEST_F(CoordinatorDiskFullTest, BelowTheReserveNewWorkIsRefusedAndRunningWorkGoesOn) {
  auto opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  JobManager* m = opened->get();
  auto running = Submit(m);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_TRUE(Register(m, "w0").ok());

  fs_->low = true;  // 1 MiB free, writes still work
  auto job = Submit(m);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kUnavailable) << job.status().ToString();
  for (const std::string& part :
       std::vector<std::string>{"submitting a job refused: only 1 MiB free in " + data_dir_,
                                "reserve of 64 MiB", "Free space"}) {
    EXPECT_TRUE(Contains(job.status().message(), part)) << part << ": " << job.status().ToString();
  }
  auto worker = Register(m, "w1");
  EXPECT_EQ(worker.status().code(), StatusCode::kUnavailable) << worker.status().ToString();
  EXPECT_TRUE(Contains(worker.status().message(), "registering worker w1 refused"));
  EXPECT_EQ(NumJobs(m), 1);
  EXPECT_EQ(NumWorkers(m), 1);
  // A dry run writes nothing: still answered. The running job can still change state.
  EXPECT_TRUE(Submit(m, /*dry_run=*/true).ok());
  v1::CancelJobRequest cancel;
  cancel.set_id(running->id());
  auto cancelled = m->CancelJob(cancel, "", false);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);

  fs_->low = false;  // space freed: new work is taken again
  EXPECT_TRUE(Submit(m).ok());
  EXPECT_TRUE(Register(m, "w1").ok());
}

// Without a reserve the write itself meets the full disk: the RPC fails UNAVAILABLE and
// nothing changed in memory either (what the coordinator serves matches what a restart reads).
TEST_F(CoordinatorDiskFullTest, AWriteRefusedForLackOfSpaceFailsTheCallAndChangesNothing) {
  auto opened = Open(/*min_free_bytes=*/0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  JobManager* m = opened->get();
  ASSERT_TRUE(Register(m, "w0").ok());
  fs_->full = true;
  auto job = Submit(m);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kUnavailable) << job.status().ToString();
  EXPECT_TRUE(Contains(job.status().message(), "writing coordinator state in " + data_dir_))
      << job.status().ToString();
  EXPECT_TRUE(Contains(job.status().message(), "the disk is full")) << job.status().ToString();
  EXPECT_EQ(NumJobs(m), 0);
  auto worker = Register(m, "w1");
  EXPECT_EQ(worker.status().code(), StatusCode::kUnavailable) << worker.status().ToString();
  EXPECT_EQ(NumWorkers(m), 1);
}

// The real binary: started where the file system has less free than --min-free-mb (here more
// than any disk has), it exits 1 with the reason; no signal, no core.
TEST(CoordinatorDiskFullProcess, ExitsCleanlyNamingTheDataDirWhenSpaceIsShort) {
  testing::TempDir dir;
  std::string output;
  const std::string data_dir = dir.Sub("data");
  int rc = testing::RunCommand(testing::BinPath("mlcd-coordinator"),
                               {"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir",
                                data_dir, "--min-free-mb", std::to_string(uint64_t{1} << 30)},
                               &output, {}, std::chrono::seconds(60));
  EXPECT_EQ(rc, 1) << output;
  EXPECT_TRUE(Contains(output, "mlcd-coordinator cannot start")) << output;
  EXPECT_TRUE(Contains(output, data_dir + "/db")) << output;
  EXPECT_TRUE(Contains(output, "Free space there")) << output;
}

}  // namespace
}  // namespace mlcd::coordinator
