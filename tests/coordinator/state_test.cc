// The coordinator's persisted state, in process: CoordinatorStore round trips, and the
// JobManager's jobs, request ids, history and workers surviving a reopen of the same data
// dir (the scheduler is not started, so jobs stay where the test puts them). The gang
// scheduler tests write jobs that wait for workers (TRAINING, round 0 labelled) straight
// into the store, start the scheduler and play the workers through the API in process.
#include <gtest/gtest.h>

#include <prometheus/registry.h>
#include <rocksdb/db.h>

#include <chrono>
#include <functional>
#include <thread>

#include "common/job_spec.h"
#include "common/limits.h"
#include "coordinator/bad_samples_record.h"
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
    batch.PutRequest("token:alice", "r1", "a-1");
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
  EXPECT_EQ(*(*store)->FindRequest("token:alice", "r1"), "a-1");
  EXPECT_EQ((*store)->FindRequest("token:alice", "r2").status().code(), StatusCode::kNotFound);
  // Request ids are per identity.
  EXPECT_EQ((*store)->FindRequest("token:bob", "r1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->FindRequest("", "r1").status().code(), StatusCode::kNotFound);
  std::vector<v1::JobHistoryEntry> history;
  ASSERT_TRUE((*store)->ReadHistory("a-1", &history).ok());
  ASSERT_EQ(history.size(), 12u);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(history[i].seq(), i + 1);  // numeric order, not lexicographic
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

// Writes `key` = `value` straight into the RocksDB in `dir` (as another binary would).
void PutRaw(const std::string& dir, const std::string& key, const std::string& value) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options options;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
}

TEST(CoordinatorStore, FormatVersionIsWrittenAndANewerOneIsRefusedUnchanged) {
  mlcd::testing::TempDir dir;
  {
    auto store = CoordinatorStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->format_version(), kStoreFormatVersion);
    StoreBatch batch;
    batch.PutNextJobSeq(7);
    ASSERT_TRUE((*store)->Commit(&batch).ok());
  }
  // A database of an older binary (no version key, i.e. version 1): opens, upgraded to this
  // version, and gets the key.
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), "meta/format_version").ok());
  }
  {
    auto store = CoordinatorStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->format_version(), kStoreFormatVersion);
    EXPECT_EQ(*(*store)->NextJobSeq(), 7);
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "meta/format_version", &value).ok());
    EXPECT_EQ(value, std::to_string(kStoreFormatVersion));
  }
  // A newer binary's database: refused with what to do, and left as it was.
  PutRaw(dir.path(), "meta/format_version", std::to_string(kStoreFormatVersion + 1));
  auto newer = CoordinatorStore::Open(dir.path());
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer mlcd-coordinator"), std::string::npos)
      << newer.status().message();
  EXPECT_NE(newer.status().message().find("Backups"), std::string::npos);
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "meta/format_version", &value).ok());
    EXPECT_EQ(value, std::to_string(kStoreFormatVersion + 1));
  }
  // Garbage in the key is corruption, not a version.
  PutRaw(dir.path(), "meta/format_version", "two");
  auto garbage = CoordinatorStore::Open(dir.path());
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kDataLoss);
}

// Format version 1 kept one request id for every caller (request/<id> -> job id). Opening
// such a database scopes each to the identity its job records as submitter; a request id
// whose job is missing is dropped; nothing else changes.
TEST(CoordinatorStore, VersionOneRequestIdsGoToTheirJobsSubmitter) {
  mlcd::testing::TempDir dir;
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    options.create_if_missing = true;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    auto put_job = [&](const std::string& id, const std::string& submitted_by) {
      v1::JobRecord record;
      record.mutable_job()->set_id(id);
      record.mutable_job()->set_submitted_by(submitted_by);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "job/" + id, record.SerializeAsString()).ok());
    };
    put_job("a-1", "token:alice");
    put_job("b-2", "");  // submitted while the coordinator checked no one
    put_job("c-3", "cert:odd/name %x");
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "request/nightly", "a-1").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "request/open", "b-2").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "request/odd/id", "c-3").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "request/gone", "z-9").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "meta/format_version", "1").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "meta/next_job_seq", "4").ok());
  }
  for (int open = 0; open < 2; ++open) {  // the upgrade is done once and then stays
    auto store = CoordinatorStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    CoordinatorStore& s = **store;
    EXPECT_EQ(s.format_version(), kStoreFormatVersion);
    EXPECT_EQ(*s.FindRequest("token:alice", "nightly"), "a-1");
    EXPECT_EQ(s.FindRequest("token:bob", "nightly").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(s.FindRequest("", "nightly").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*s.FindRequest("", "open"), "b-2");
    EXPECT_EQ(s.FindRequest("token:alice", "open").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*s.FindRequest("cert:odd/name %x", "odd/id"), "c-3");
    EXPECT_EQ(s.FindRequest("cert:odd", "name %x/odd/id").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(s.FindRequest("", "gone").status().code(), StatusCode::kNotFound);
    std::vector<v1::JobRecord> jobs;
    ASSERT_TRUE(s.LoadJobs(&jobs).ok());
    EXPECT_EQ(jobs.size(), 3u);
    EXPECT_EQ(*s.NextJobSeq(), 4);
  }
  // The version 1 keys are gone.
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir.path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  int old_keys = 0;
  for (it->Seek("request/"); it->Valid() && it->key().starts_with("request/"); it->Next())
    ++old_keys;
  EXPECT_EQ(old_keys, 0);
}

TEST(CoordinatorStore, ACheckpointOpensAsADatabaseOfItsOwn) {
  mlcd::testing::TempDir dir;
  auto store = CoordinatorStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StoreBatch batch;
  v1::JobRecord record;
  record.mutable_job()->set_id("b-1");
  batch.PutJob(record);
  batch.PutNextJobSeq(2);
  ASSERT_TRUE((*store)->Commit(&batch).ok());
  ASSERT_TRUE((*store)->Checkpoint(dir.path() + "/copy").ok());
  // Writes after the checkpoint are not in it.
  StoreBatch later;
  later.PutNextJobSeq(9);
  ASSERT_TRUE((*store)->Commit(&later).ok());
  EXPECT_FALSE((*store)->Checkpoint(dir.path() + "/copy").ok());  // never over another
  auto copy = CoordinatorStore::Open(dir.path() + "/copy");
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  std::vector<v1::JobRecord> jobs;
  ASSERT_TRUE((*copy)->LoadJobs(&jobs).ok());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job().id(), "b-1");
  EXPECT_EQ(*(*copy)->NextJobSeq(), 2);
}

// A TRAIN gang attempt of round 0 with `ranks` members <attempt>-r<i>.
void StartTrainAttempt(JobEntry* job, const std::string& attempt, int ranks) {
  v1::GangAttempt* a = job->rec.mutable_attempt();
  a->Clear();
  a->set_id(attempt);
  a->set_kind(v1::ASSIGNMENT_KIND_TRAIN);
  a->set_round(0);
  for (int i = 0; i < ranks; ++i) a->add_members()->set_assignment_id(attempt + "-r" + std::to_string(i));
}

v1::WorkerProgress BadProgress(int64_t count, const std::vector<std::string>& keys) {
  v1::WorkerProgress p;
  p.set_bad_samples(count);
  for (const auto& k : keys) p.add_bad_sample_keys(k);
  return p;
}

// The round's bad samples from the ranks' reports (docs/data.md, "Bad images"): summed over
// the ranks, a rank's repeated report not added again, distinct keys in the order reported and
// bounded, a restarted gang not added to the first, other phases ignored.
TEST(BadSamplesRecord, SumsRanksKeepsTheMostOfAnAttemptAndBoundsTheKeys) {
  JobEntry job;
  job.job().add_rounds();
  StartTrainAttempt(&job, "a1", 2);
  RecordBadSamples(&job, "a1-r0", BadProgress(2, {"k0", "k1"}));
  RecordBadSamples(&job, "a1-r1", BadProgress(1, {"k1"}));
  RecordBadSamples(&job, "a1-r0", BadProgress(2, {"k0", "k1"}));  // the next heartbeat
  const v1::BadSamples& bad = job.job().rounds(0).bad_samples();
  EXPECT_EQ(bad.count(), 3);
  EXPECT_EQ(std::vector<std::string>(bad.first_keys().begin(), bad.first_keys().end()),
            (std::vector<std::string>{"k0", "k1"}));

  const std::string long_key(kMaxBadSampleKeyBytes + 10, 'x');
  RecordBadSamples(&job, "a1-r1", BadProgress(7, {"k1", "k2", "k3", "k4", long_key, "k6"}));
  EXPECT_EQ(bad.count(), 9);
  ASSERT_EQ(bad.first_keys_size(), kMaxBadSampleKeys);
  EXPECT_EQ(bad.first_keys(4), "k4");
  EXPECT_EQ(job.rec.attempt().members(1).bad_sample_keys(4).size(), kMaxBadSampleKeyBytes);

  // A restarted gang meets the same images again: the round keeps the most of one attempt.
  StartTrainAttempt(&job, "a2", 2);
  RecordBadSamples(&job, "a2-r0", BadProgress(4, {"k9"}));
  EXPECT_EQ(bad.count(), 9);
  RecordBadSamples(&job, "a2-r1", BadProgress(6, {}));
  EXPECT_EQ(bad.count(), 10);
  EXPECT_EQ(bad.first_keys_size(), kMaxBadSampleKeys);

  // Not a training gang, or no bad samples: nothing changes.
  job.rec.mutable_attempt()->set_kind(v1::ASSIGNMENT_KIND_EVALUATE);
  RecordBadSamples(&job, "a2-r0", BadProgress(50, {"e0"}));
  job.rec.mutable_attempt()->set_kind(v1::ASSIGNMENT_KIND_TRAIN);
  RecordBadSamples(&job, "a2-r0", BadProgress(0, {}));
  EXPECT_EQ(bad.count(), 10);
  EXPECT_EQ(job.rec.attempt().members(0).bad_samples(), 4);
}

class JobManagerStateTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobManager> Open() {
    JobManagerOptions options;
    options.data_dir = dir_.path();
    // Never reached: the scheduler is not started, or only sees jobs past ASSIGNING.
    options.clusterd_address = "127.0.0.1:1";
    options.tick = std::chrono::milliseconds(10);
    auto manager = JobManager::Open(options, &metrics_);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }
  v1::Job Submit(JobManager* m, const std::string& request_id, const std::string& caller = "") {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(kSpec);
    request.set_request_id(request_id);
    auto job = m->SubmitJob(request, caller);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : v1::Job();
  }

  // Writes job `name`-`seq` into the store as the coordinator leaves it after ASSIGNING:
  // TRAINING round 0, labelled, no gang yet. Call before Open().
  void WriteTrainingJob(const std::string& name, int64_t seq, int world_size, int restarts = 0) {
    auto store = CoordinatorStore::Open(dir_.path() + "/db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::string yaml = kSpec;
    yaml.replace(yaml.find("world_size: 2"), 13, "world_size: " + std::to_string(world_size));
    auto parsed = LoadJobSpecYaml(yaml);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    v1::JobRecord record;
    v1::Job& job = *record.mutable_job();
    job.set_id(name + "-" + std::to_string(seq));
    *job.mutable_spec() = parsed->spec;
    job.mutable_metadata()->set_name(name);
    job.set_state(v1::JOB_STATE_TRAINING);
    job.set_restarts(restarts);
    job.set_message(restarts ? "gang " + job.id() + "-a1 aborted: worker w0 failed" : "labelled");
    auto* round = job.add_rounds();
    round->set_clustered(true);
    round->set_assigned(true);
    round->set_label_set("job/" + job.id() + "/r0");
    record.set_seq(seq);
    record.set_next_history_seq(1);
    record.set_state_entered_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
    StoreBatch batch;
    batch.PutJob(record);
    batch.PutNextJobSeq(seq + 1);
    ASSERT_TRUE((*store)->Commit(&batch).ok());
  }
  // A worker slot that can train, ready for gangs (it offers a rendezvous port).
  static void Register(JobManager* m, const std::string& name) {
    v1::RegisterWorkerRequest reg;
    reg.set_name(name);
    reg.set_host("127.0.0.1");
    reg.set_rendezvous_port(29500);
    reg.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    auto r = m->RegisterWorker(reg, "");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  static v1::Job Get(JobManager* m, const std::string& id, bool history = false) {
    v1::GetJobRequest get;
    get.set_id(id);
    get.set_include_history(history);
    auto job = m->GetJob(get);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : v1::Job();
  }
  // Polls `done` (the scheduler ticks every 10 ms) for up to 5 s.
  static bool Eventually(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  double Gauge(const std::string& name) {
    for (const auto& family : registry_.Collect()) {
      if (family.name == name && !family.metric.empty()) return family.metric[0].gauge.value;
    }
    return -1;
  }

  mlcd::testing::TempDir dir_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
};

// Request ids are scoped by the caller's identity, and stay so across a restart.
TEST_F(JobManagerStateTest, RequestIdsBelongToTheIdentityThatUsedThem) {
  std::string alice_job, bob_job;
  {
    auto m = Open();
    ASSERT_TRUE(m);
    alice_job = Submit(m.get(), "nightly", "token:alice").id();
    EXPECT_EQ(Submit(m.get(), "nightly", "token:alice").id(), alice_job);
    const v1::Job bob = Submit(m.get(), "nightly", "token:bob");
    bob_job = bob.id();
    EXPECT_NE(bob_job, alice_job);
    EXPECT_EQ(bob.submitted_by(), "token:bob");
    // A dry run of bob's says nothing of alice's job.
    v1::SubmitJobRequest dry;
    dry.set_spec_yaml(kSpec);
    dry.set_request_id("nightly");
    dry.set_dry_run(true);
    auto answer = m->SubmitJob(dry, "token:carol");
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    EXPECT_EQ(answer->message().find(alice_job), std::string::npos) << answer->message();
  }
  auto m = Open();
  ASSERT_TRUE(m);
  EXPECT_EQ(Submit(m.get(), "nightly", "token:alice").id(), alice_job);
  EXPECT_EQ(Submit(m.get(), "nightly", "token:bob").id(), bob_job);
  const v1::Job carol = Submit(m.get(), "nightly", "token:carol");
  EXPECT_NE(carol.id(), alice_job);
  EXPECT_NE(carol.id(), bob_job);
  // Another spec under alice's own request id is ALREADY_EXISTS, naming her job.
  v1::SubmitJobRequest other;
  std::string yaml = kSpec;
  yaml.replace(yaml.find("k: 8"), 4, "k: 9");
  other.set_spec_yaml(yaml);
  other.set_request_id("nightly");
  auto refused = m->SubmitJob(other, "token:alice");
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find(alice_job), std::string::npos);
}

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
    EXPECT_EQ(ja.tensorboard_dir(), dir_.path() + "/jobs/unit-1/tensorboard");
    v1::CancelJobRequest cancel;
    cancel.set_id(b);
    cancel.set_reason("unit test");
    auto cancelled = m->CancelJob(cancel, "", false);
    ASSERT_TRUE(cancelled.ok());
    EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
    EXPECT_EQ(cancelled->message(), "cancelled: unit test");
    // Cancelling a finished job is refused, cancelling it again is a no-op.
    EXPECT_TRUE(m->CancelJob(cancel, "", false).ok());
    v1::RegisterWorkerRequest reg;
    reg.set_name("w0");
    reg.set_host("10.0.0.5");
    reg.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    ASSERT_TRUE(m->RegisterWorker(reg, "").ok());
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
  EXPECT_EQ(ja->tensorboard_dir(), dir_.path() + "/jobs/unit-1/tensorboard");
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
  EXPECT_TRUE(m->CancelJob(cancel, "", false).ok());
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
  auto job = m->SubmitJob(dry, "");
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(job->id().empty());
  EXPECT_TRUE(job->tensorboard_dir().empty());
  v1::SubmitJobRequest bad;
  bad.set_spec_yaml(std::string(kSpec) + "  loss: {variant: arcface}\n");
  auto rejected = m->SubmitJob(bad, "");
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("spec.loss.variant: 'arcface'"), std::string::npos);
  auto list = m->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 0);
  // The next real job is number 1: nothing was consumed.
  EXPECT_EQ(Submit(m.get(), "").id(), "unit-1");
}

TEST_F(JobManagerStateTest, TimeInTheCurrentStateSurvivesAReopen) {
  std::string id;
  {
    auto m = Open();
    ASSERT_TRUE(m);
    id = Submit(m.get(), "").id();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto m = Open();
  ASSERT_TRUE(m);
  // Counted from the persisted time the job entered PENDING, not from the reopen.
  EXPECT_GE(Get(m.get(), id).phase_seconds().at("PENDING"), 0.4);
}

TEST_F(JobManagerStateTest, ReloadFailsAJobWhoseLastAllowedRestartWasAlreadyUsed) {
  // What an older coordinator left when it was killed between persisting the abort that
  // used up max_restarts (default 3) and the FAILED that follows it.
  WriteTrainingJob("spent", 1, 2, /*restarts=*/4);
  {
    auto m = Open();
    ASSERT_TRUE(m);
    m->Start();
    Register(m.get(), "w0");
    Register(m.get(), "w1");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few ticks: no gang may start
    v1::Job job = Get(m.get(), "spent-1");
    EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
    EXPECT_NE(job.message().find("gang failed 4 times (max_restarts 3)"), std::string::npos)
        << job.message();
    EXPECT_EQ(job.attempts(), 0);
  }
  auto m = Open();
  ASSERT_TRUE(m);
  EXPECT_EQ(Get(m.get(), "spent-1").state(), v1::JOB_STATE_FAILED);
}

// A job whose world_size exceeds the registered workers waits without blocking later jobs
// that fit; among those, gangs form in submission order. Also: a cancel with a gang running
// is one write, a cancelled poll keeps its assignment, and only a delivered assignment
// counts as a restart when its worker re-registers.
TEST_F(JobManagerStateTest, SchedulerSkipsJobsThatCannotFitAndKeepsFifoAmongTheRest) {
  WriteTrainingJob("big", 1, 4);
  WriteTrainingJob("small", 2, 2);
  WriteTrainingJob("later", 3, 2);
  auto m = Open();
  ASSERT_TRUE(m);
  m->Start();
  Register(m.get(), "w0");
  Register(m.get(), "w1");
  ASSERT_TRUE(Eventually([&] { return Get(m.get(), "small-2").progress().gang_size() == 2; }));
  v1::Job big = Get(m.get(), "big-1");
  EXPECT_EQ(big.progress().gang_size(), 0);
  EXPECT_EQ(big.progress().detail(),
            "needs 4 workers that can train, 2 registered (later jobs that fit run meanwhile)");
  // "later" fits but waits for "small"'s workers: FIFO among jobs that can run.
  const std::string waits = "waiting for 2 idle workers that can train (0 idle, 2 registered)";
  ASSERT_TRUE(Eventually([&] { return Get(m.get(), "later-3").progress().detail() == waits; }))
      << Get(m.get(), "later-3").progress().detail();
  EXPECT_EQ(Get(m.get(), "later-3").progress().gang_size(), 0);
  EXPECT_EQ(Gauge("mlcd_coordinator_jobs_waiting_for_workers"), 2);  // big and later

  // Cancelling "small" aborts its gang and ends the job in one write; its workers (which
  // never took their assignments) go to "later".
  v1::CancelJobRequest cancel;
  cancel.set_id("small-2");
  ASSERT_TRUE(m->CancelJob(cancel, "", false).ok());
  v1::Job small = Get(m.get(), "small-2", true);
  EXPECT_EQ(small.state(), v1::JOB_STATE_CANCELLED);
  ASSERT_GE(small.history_size(), 3);
  const auto& abort = small.history(small.history_size() - 2);
  const auto& cancelled = small.history(small.history_size() - 1);
  EXPECT_EQ(abort.kind(), "gang_aborted");
  EXPECT_EQ(abort.state(), v1::JOB_STATE_TRAINING);  // the state the gang ran in
  EXPECT_EQ(cancelled.kind(), "state");
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled.seq(), abort.seq() + 1);
  ASSERT_TRUE(Eventually([&] { return Get(m.get(), "later-3").progress().gang_size() == 2; }));
  EXPECT_EQ(Get(m.get(), "big-1").progress().gang_size(), 0);

  // A poll whose client gave up does not consume the assignment; the next poll gets it.
  v1::GetAssignmentRequest poll;
  poll.set_worker_id("w0");
  auto lost = m->GetAssignment(poll, "", [] { return true; });
  EXPECT_EQ(lost.status().code(), StatusCode::kCancelled);
  auto got = m->GetAssignment(poll, "", [] { return false; });
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->kind(), v1::ASSIGNMENT_KIND_TRAIN);
  EXPECT_EQ(got->job_id(), "later-3");
  // The record was written without Job.tensorboard_dir (an older coordinator's): loading
  // gives it this coordinator's folder, and rank 0's assignment names it.
  EXPECT_EQ(got->tensorboard_dir(), dir_.path() + "/jobs/later-3/tensorboard");
  EXPECT_EQ(Get(m.get(), "later-3").tensorboard_dir(), got->tensorboard_dir());

  // w1 never received its assignment: its re-registration aborts the gang but is no failure.
  Register(m.get(), "w1");
  v1::Job later = Get(m.get(), "later-3");
  EXPECT_EQ(later.restarts(), 0);
  EXPECT_EQ(later.state(), v1::JOB_STATE_TRAINING);
  // Once a re-registering worker had its assignment, it is. (w0 ran the aborted gang: its
  // next poll says it stopped, then both form the next gang.)
  ASSERT_TRUE(m->GetAssignment(poll, "", [] { return false; }).ok());
  ASSERT_TRUE(Eventually([&] { return Get(m.get(), "later-3").progress().gang_size() == 2; }));
  got = m->GetAssignment(poll, "", [] { return false; });
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->job_id(), "later-3");
  Register(m.get(), "w0");
  EXPECT_EQ(Get(m.get(), "later-3").restarts(), 1);
}

}  // namespace
}  // namespace mlcd::coordinator
