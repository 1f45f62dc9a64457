// Hardening checks against the real mlcd-coordinator, mlcd-clusterd and mlcd-labelstore on
// loopback: spec paths confined to the data roots (no existence oracle), a crafted IDX file
// that fails its job instead of crashing a daemon, and a phase that died with the coordinator
// twice failing its job instead of being resumed into the same crash.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/services_fixture.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

std::string Head(const std::string& name) {
  return "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: " + name + "}\nspec:\n";
}

class CoordinatorHardeningTest : public ServicesTest {
 protected:
  StatusOr<v1::Job> DryRun(const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    req.set_dry_run(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(20));
    v1::Job job;
    grpc::Status st = cluster_->stub()->SubmitJob(&ctx, req, &job);
    if (!st.ok()) return FromGrpcStatus(st);
    return job;
  }
};

// Before: checkpoint_dir only had to be absolute (/etc/cron.d was accepted) and a dry run
// told whether any path existed on the coordinator's host. Now each path must resolve under
// a data root, and an existing and a missing path outside get the same answer.
TEST_F(CoordinatorHardeningTest, SpecPathsOutsideTheDataRootsAreRefusedAlike) {
  TempDir outside;
  ASSERT_TRUE(WriteFileAtomically(outside.Sub("secret.npy"), std::string("x")).ok());
  auto answer = [&](const std::string& path) {
    auto job =
        DryRun(Head("oracle") + "  clustering: {k: 8, l: 2, features: {kind: npy, paths: ['" +
               path + "']}}\n  evaluation: {enabled: false}\n");
    EXPECT_FALSE(job.ok());
    std::string m = job.status().message();
    const size_t at = m.find(path);
    EXPECT_NE(at, std::string::npos) << m;
    if (at != std::string::npos) m.replace(at, path.size(), "<path>");
    return m;
  };
  const std::string exists = answer(outside.Sub("secret.npy"));
  const std::string missing = answer(outside.Sub("nothing.npy"));
  EXPECT_EQ(exists, missing);
  EXPECT_NE(exists.find("is not under a data root"), std::string::npos) << exists;
  EXPECT_EQ(exists.find("does not exist"), std::string::npos) << exists;
  // Inside a root, a missing path is still named as missing.
  EXPECT_NE(answer(dir_.Sub("nothing.npy")).find("does not exist"), std::string::npos);

  for (const std::string& ckpt : {std::string("/etc/cron.d"), dir_.Sub("../../etc/cron.d")}) {
    auto job = DryRun(Head("ckpt") + "  dataset: {limit: 500}\n  clustering: {k: 8, l: 2}\n" +
                      "  training: {checkpoint_dir: '" + ckpt + "'}\n");
    ASSERT_FALSE(job.ok());
    EXPECT_NE(job.status().message().find("spec.training.checkpoint_dir: '" + ckpt +
                                          "' is not under a data root"),
              std::string::npos)
        << job.status().message();
  }
  auto dataset =
      DryRun(Head("ds") + "  dataset: {path: /etc, limit: 500}\n  clustering: {k: 8, l: 2}\n");
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("spec.dataset.path: '/etc' is not under a data root"),
            std::string::npos)
      << dataset.status().message();
  // Inside the roots (the harness's dir and /usr/share/datasets) the same spec is fine, with the
  // checkpoints in the submitter's (this test's admin token's) output area.
  auto ok = DryRun(Head("ok") + "  dataset: {limit: 500}\n  clustering: {k: 8, l: 2}\n" +
                   "  training: {checkpoint_dir: '" + cluster_->coordinator_data_dir() +
                   "/users/token/admin/ckpt'}\n");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

// Before: an IDX header whose sizes overflow made std::length_error escape the phase thread
// (the daemon crashed, and crashed again on every retry). Now the job fails with the reason
// and every service keeps serving.
TEST_F(CoordinatorHardeningTest, ACraftedIdxFileFailsItsJobAndNoDaemon) {
  const std::string data = dir_.Sub("evil-mnist");
  ASSERT_TRUE(MakeDirs(data).ok());
  auto be = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  ASSERT_TRUE(WriteFileAtomically(data + "/train-images-idx3-ubyte",
                                  be(0x803) + be(0xffffffffu) + be(0xffffffffu) + be(0xffffffffu))
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomically(data + "/train-labels-idx1-ubyte", be(0x801) + be(1000) + "x").ok());
  auto job = cluster_->Submit(Head("evil") + "  dataset: {path: '" + data +
                              "', limit: 500}\n  clustering: {k: 8, l: 2}\n"
                              "  evaluation: {enabled: false}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForState(job->id(), v1::JOB_STATE_FAILED, seconds(60));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_NE(done->message().find("IDX header gives"), std::string::npos) << done->message();
  EXPECT_TRUE(WaitForServing(cluster_->clusterd_address(), seconds(5)).ok());
  EXPECT_TRUE(WaitForServing(cluster_->coordinator_address(), seconds(5)).ok());
}

// Before: a job whose phase crashed the daemon was persisted in CLUSTERING and resumed into
// the same crash on every restart. Now the attempt is written before the phase runs; the
// second attempt that dies with the coordinator fails the job with the reason.
TEST_F(CoordinatorHardeningTest, APhaseThatDiesWithTheCoordinatorTwiceFailsTheJob) {
  // k-means of 20000 Fashion-MNIST images into 500 centres for 1000 iterations: minutes,
  // long enough to kill the coordinator under it.
  auto job = cluster_->Submit(Head("loop") +
                              "  dataset: {limit: 20000}\n"
                              "  clustering: {k: 500, l: 2, niter: 1000}\n"
                              "  evaluation: {enabled: false}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto in_phase = [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_CLUSTERING && !j.progress().detail().empty();
  };
  for (int crash = 1; crash <= 2; ++crash) {
    auto running = cluster_->WaitForJob(job->id(), in_phase, seconds(120));
    ASSERT_TRUE(running.ok() && in_phase(*running))
        << "crash " << crash << ": " << (running.ok() ? running->DebugString() : "");
    cluster_->KillCoordinator();
    ASSERT_TRUE(cluster_->StartCoordinator().ok()) << cluster_->Logs();
  }
  auto failed = cluster_->WaitForState(job->id(), v1::JOB_STATE_FAILED, seconds(30));
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_NE(failed->message().find("CLUSTERING died with the coordinator or clusterd 2 times"),
            std::string::npos)
      << failed->message();
  EXPECT_NE(failed->message().find("not resumed into the same crash"), std::string::npos);
}

// Before: 300 WatchJob streams took the coordinator from 17 to 316 threads, an 8 MiB cancel
// reason and a 10 MiB worker host were persisted, a 27 MB YAML dry run was parsed. Now each
// has a bound, and the refusal says which.
TEST_F(CoordinatorHardeningTest, StreamsRequestsAndStringsAreBounded) {
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->StartCoordinator({"--max-watch-streams", "3"}).ok()) << cluster_->Logs();
  auto job = cluster_->Submit(Head("bounded") + "  dataset: {limit: 500}\n" +
                              "  clustering: {k: 8, l: 2}\n  evaluation: {enabled: false}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> streams;
  v1::WatchJobRequest watch;
  watch.set_id(job->id());
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(cluster_->stub()->WatchJob(contexts.back().get(), watch));
    v1::JobEvent event;
    ASSERT_TRUE(streams.back()->Read(&event)) << "stream " << i;  // open on the server
  }
  grpc::ClientContext extra;
  auto refused = cluster_->stub()->WatchJob(&extra, watch);
  v1::JobEvent event;
  EXPECT_FALSE(refused->Read(&event));
  grpc::Status st = refused->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("3 WatchJob streams are open"), std::string::npos)
      << st.error_message();
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : streams) (void)r->Finish();
  // A slot is free again once a stream ends (the server notices a cancel within 500 ms).
  bool reopened = false;
  for (int attempt = 0; attempt < 50 && !reopened; ++attempt) {
    grpc::ClientContext again;
    again.set_deadline(std::chrono::system_clock::now() + seconds(10));
    auto stream = cluster_->stub()->WatchJob(&again, watch);
    reopened = stream->Read(&event);
    again.TryCancel();
    (void)stream->Finish();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(reopened);

  v1::CancelJobRequest cancel;
  cancel.set_id(job->id());
  cancel.set_reason(std::string(8 << 10, 'r'));
  grpc::ClientContext cancel_ctx;
  v1::Job cancelled;
  st = cluster_->stub()->CancelJob(&cancel_ctx, cancel, &cancelled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("reason: 8192 bytes; at most 1000"), std::string::npos)
      << st.error_message();

  v1::RegisterWorkerRequest reg;
  reg.set_name("w-big-host");
  reg.set_host(std::string(10 << 10, 'h'));
  reg.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
  grpc::ClientContext reg_ctx;
  v1::RegisterWorkerResponse reg_response;
  st = cluster_->stub()->RegisterWorker(&reg_ctx, reg, &reg_response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("host: longer than 255 bytes"), std::string::npos);

  // A 27 MB YAML dry run never reaches the parser: gRPC refuses the message (8 MiB at most).
  auto huge = DryRun(Head("huge") + "# " + std::string(27 << 20, 'x') + "\n");
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
  // 2 MiB passes gRPC and is refused by the spec's own limit, which it names.
  auto big = DryRun(Head("big") + "# " + std::string(2 << 20, 'x') + "\n");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("at most 1048576 are read"), std::string::npos)
      << big.status().message();
}

// Before: image_size 4096 with patch_size 1 (16.7M tokens per
// image) and 256 loader threads decoding ~300 MB each passed submit. Now the coordinator refuses
// both, naming the field and the numbers.
TEST_F(CoordinatorHardeningTest, SequenceActivationsAndDecodeThreadsAreBoundedAtSubmit) {
  auto tokens = DryRun(Head("tokens") + "  dataset: {limit: 500}\n" +
                       "  model: {image_size: 4096, patch_size: 1}\n");
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(tokens.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tokens.status().message().find("spec.model.image_size: image_size 4096 / patch_size "
                                           "1 gives 4096^2 = 16777216 tokens per image; at most "
                                           "65536"),
            std::string::npos)
      << tokens.status().message();
  auto activations = DryRun(Head("activations") + "  dataset: {limit: 5000}\n" +
                            "  model: {preset: vit-b32, image_size: 1024, patch_size: 16}\n" +
                            "  training: {batch_size: 1024}\n");
  ASSERT_FALSE(activations.ok());
  EXPECT_EQ(activations.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(activations.status().message().find("spec.training.batch_size: the activations of "
                                                "one worker's batch would take about"),
            std::string::npos)
      << activations.status().message();
  EXPECT_NE(activations.status().message().find("at most 549.756 GB"), std::string::npos);
  auto threads = DryRun(Head("threads") + "  dataset: {limit: 500, loader_threads: 256}\n");
  ASSERT_FALSE(threads.ok());
  EXPECT_EQ(threads.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(threads.status().message().find("spec.dataset.loader_threads: 256 threads need at "
                                            "least 256 x 16 MiB = 4096 MiB of decode memory, "
                                            "more than decode_memory_mb 1024"),
            std::string::npos)
      << threads.status().message();
}

// Before: the WatchJob streams were one pool for every caller, so one
// viewer holding them all left no stream for anyone. Now each identity has its own cap under
// the global one: the viewer at its cap is refused while another identity still watches.
TEST_F(CoordinatorHardeningTest, WatchStreamsAreLimitedPerIdentityUnderAGlobalCap) {
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_
                  ->StartCoordinator({"--max-watch-streams", "4",
                                      "--max-watch-streams-per-identity", "2"})
                  .ok())
      << cluster_->Logs();
  auto job = cluster_->Submit(Head("watched") + "  dataset: {limit: 500}\n" +
                              "  clustering: {k: 8, l: 2}\n  evaluation: {enabled: false}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const TestSecurity& t = TestCerts();
  v1::WatchJobRequest watch;
  watch.set_id(job->id());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> streams;
  // Opens a stream as the holder of `token`: its status once the first event came or not.
  auto open = [&](const std::string& token) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->AddMetadata("authorization", "Bearer " + token);
    contexts.back()->set_deadline(std::chrono::system_clock::now() + seconds(30));
    streams.push_back(cluster_->stub()->WatchJob(contexts.back().get(), watch));
    v1::JobEvent event;
    if (streams.back()->Read(&event)) return grpc::Status::OK;
    return streams.back()->Finish();
  };
  ASSERT_TRUE(open(t.viewer_token).ok());
  ASSERT_TRUE(open(t.viewer_token).ok());
  grpc::Status third = open(t.viewer_token);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error_message().find("2 WatchJob streams of 'token:carol' are open, the most "
                                       "one identity may hold "
                                       "(--max-watch-streams-per-identity)"),
            std::string::npos)
      << third.error_message();
  // Another identity still watches, up to the global cap of 4.
  EXPECT_TRUE(open(t.submitter_token).ok());
  EXPECT_TRUE(open(t.admin_token).ok());
  grpc::Status full = open(t.submitter2_token);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(full.error_message().find("4 WatchJob streams are open (--max-watch-streams)"),
            std::string::npos)
      << full.error_message();
  for (auto& c : contexts) c->TryCancel();
  for (size_t i = 0; i < streams.size(); ++i)
    if (i != 2 && i != 5) (void)streams[i]->Finish();
}

// Before: once a worker was no longer alive, any identity could register
// its name and take its place. Now the name stays bound to its identity for a lease after the
// worker was last heard from: another identity is refused until the lease ends; the same one
// may come back at any time.
TEST_F(CoordinatorHardeningTest, ADeadWorkersNameStaysBoundToItsIdentityForTheLease) {
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_
                  ->StartCoordinator({"--idle-worker-timeout", "1", "--worker-name-lease-seconds",
                                      "4"})
                  .ok())
      << cluster_->Logs();
  const TestSecurity& t = TestCerts();
  auto register_as = [&](const std::string& token) {
    v1::RegisterWorkerRequest reg;
    reg.set_name("w-leased");
    reg.set_host("127.0.0.1");
    reg.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::RegisterWorkerResponse response;
    return cluster_->stub()->RegisterWorker(&ctx, reg, &response);
  };
  ASSERT_TRUE(register_as(t.worker_token).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the idle timeout: dead
  grpc::Status taken = register_as(t.worker2_token);
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(taken.error_message().find("worker name 'w-leased' stays bound to 'token:worker-a', "
                                       "which registered it, for 4 s after it was last heard "
                                       "from (--worker-name-lease-seconds)"),
            std::string::npos)
      << taken.error_message();
  // Its own identity comes back (and so starts the lease again when it goes silent).
  const auto back = std::chrono::steady_clock::now();
  ASSERT_TRUE(register_as(t.worker_token).ok());
  grpc::Status later;
  for (int i = 0; i < 60; ++i) {
    later = register_as(t.worker2_token);
    if (later.ok()) break;
    EXPECT_EQ(later.error_code(), grpc::StatusCode::PERMISSION_DENIED) << later.error_message();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(later.ok()) << later.error_message();
  EXPECT_GE(std::chrono::steady_clock::now() - back, seconds(4))
      << "another identity took the name before its lease ended";
}

// A one-rank tiny job on worker 0 (started, not yet idle): its training child refuses the
// job's checkpoint directory before it writes anything, the job fails with that reason, and
// the agent lives on and takes work again.
void ExpectTheCheckpointDirRefused(TestCluster& cluster) {
  ASSERT_TRUE(cluster.WaitForIdleWorkers(1, seconds(30)).ok()) << cluster.Logs();
  TinyJob spec;
  spec.world_size = 1;
  spec.max_restarts = 0;
  auto submitted = cluster.Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = cluster.WaitForState(submitted->id(), v1::JOB_STATE_FAILED, seconds(240));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED) << job->message();
  const std::string& m = job->message();
  EXPECT_NE(m.find("PERMISSION_DENIED"), std::string::npos) << m;
  EXPECT_NE(m.find("assignment.checkpoint_dir"), std::string::npos) << m;
  EXPECT_NE(m.find("is not under a data root of this service"), std::string::npos) << m;
  // Nothing was written where the assignment pointed.
  const std::string ckpt = cluster.coordinator_data_dir() + "/jobs/" + submitted->id() + "/ckpt";
  EXPECT_FALSE(PathExists(ckpt + "/LATEST")) << ckpt;
  EXPECT_TRUE(cluster.worker(0).running());
  EXPECT_TRUE(cluster.WaitForIdleWorkers(1, seconds(30)).ok()) << cluster.Logs();
}

// Before: the worker agent and its children read and wrote wherever the coordinator's spec
// and assignment said. Now an agent confines its children to its own --data-root: one
// narrower than the coordinator's (it does not cover the job's checkpoint directory) makes
// the training child refuse the assignment before it writes anything, and the job fails
// with that reason; the agent lives on, idle.
TEST_F(CoordinatorHardeningTest, AWorkerRefusesAssignmentPathsOutsideItsDataRoots) {
  const std::string worker_root = dir_.Sub("workers");
  ASSERT_TRUE(MakeDirs(worker_root).ok());
  ASSERT_TRUE(cluster_->StartWorker(0, {}, {worker_root, "/usr/share/datasets"}).ok());
  ExpectTheCheckpointDirRefused(*cluster_);
}

// Before: the worker agent took no --private-dir, so its children opened whatever lay under a
// root, the state of the services beside it included (the local cluster's tls/ and db/ are
// under the working directory, its default root). Now an agent holds its --private-dir
// folders private and passes them to its children: with the coordinator's folder private,
// the training child refuses the job's checkpoint directory inside it.
TEST_F(CoordinatorHardeningTest, AWorkerKeepsItsPrivateFoldersFromAssignments) {
  ASSERT_TRUE(cluster_->StartWorker(0, {}, {}, {cluster_->coordinator_data_dir()}).ok());
  ExpectTheCheckpointDirRefused(*cluster_);
}

}  // namespace
}  // namespace mlcd::testing
