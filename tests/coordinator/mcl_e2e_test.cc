// Multistage contrastive learning as a job kind (spec.mcl; docs/mcl.md) end to end with every
// real process on loopback: two worker agents train two InfoNCE stages of a tiny ViT on a
// small Fashion-MNIST subset, the coordinator clusters each stage into its sealed set, the
// record shows cluster sizes and the adjusted mutual information, and the stages'
// concatenation is embedded, evaluated and exported; kill -9 of a worker in stage 1 resumes
// in stage 1 with the exact step count.
#include <signal.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"
#include "worker/model/safetensors.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// Waits until a trainer's own progress log shows `step` (1-based) of `epoch` in `stage`;
// false when the job ends first or the time runs out.
bool WaitForStageStep(TestCluster& cluster, const std::string& id, int stage, int epoch,
                      int64_t step, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int w = 0; w < 2; ++w) {
      for (const auto& [assignment, events] : ProgressEvents(cluster.WorkerDataDir(w))) {
        for (const auto& e : events) {
          if (e.value("event", "") == "progress" && e.value("round", -1) == stage &&
              e.value("epoch", -1) == epoch && e.value("step_in_epoch", int64_t{0}) >= step)
            return true;
        }
      }
    }
    auto job = cluster.Get(id);
    if (job.ok() && IsTerminal(job->state())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class MclJobTest : public TwoWorkerClusterTest {};

TEST_F(MclJobTest, TwoStagesClusteredSealedEvaluatedAndExported) {
  TinyJob spec = TinyMclJob();
  spec.evaluation = true;
  spec.eval_train_limit = 300;
  spec.eval_test_limit = 200;
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  auto done = cluster_->WaitForJob(
      id, [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(400));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message() << "\n" << cluster_->Logs();
  auto job = cluster_->Get(id, /*history=*/true);
  ASSERT_TRUE(job.ok());

  // Stage 0 trained on no labels; each stage clustered after it trained.
  std::vector<std::string> states;
  for (const auto& h : job->history())
    if (h.kind() == "state") states.push_back(v1::JobState_Name(h.state()));
  const std::vector<std::string> want = {
      "JOB_STATE_TRAINING",   "JOB_STATE_EXTRACTING", "JOB_STATE_CLUSTERING", "JOB_STATE_ASSIGNING",
      "JOB_STATE_TRAINING",   "JOB_STATE_EXTRACTING", "JOB_STATE_CLUSTERING", "JOB_STATE_ASSIGNING",
      "JOB_STATE_EVALUATING", "JOB_STATE_SUCCEEDED"};
  EXPECT_EQ(states, want);
  EXPECT_EQ(job->progress().total_steps(), spec.TotalSteps());

  // Both stage sets sealed, owned by the job, with the sizes and agreement on the record.
  labelstore::LabelStoreClient store(cluster_->labelstore_address());
  ASSERT_EQ(job->rounds_size(), 2);
  std::vector<std::string> checkpoints;
  for (int j = 0; j < 2; ++j) {
    const v1::RoundStatus& r = job->rounds(j);
    EXPECT_EQ(r.label_set(), "job/" + id + "/s" + std::to_string(j));
    auto info = store.Describe(r.label_set());
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_SEALED);
    EXPECT_EQ(info->num_samples(), 384u);
    EXPECT_EQ(info->num_classes(), 2);
    EXPECT_EQ(info->labels_per_sample(), 1);
    EXPECT_EQ(info->owner(), "job:" + id);
    ASSERT_EQ(r.cluster_sizes_size(), 2);
    EXPECT_EQ(std::accumulate(r.cluster_sizes().begin(), r.cluster_sizes().end(), uint64_t{0}),
              384u);
    EXPECT_EQ(r.has_adjusted_mutual_info(), j == 1);
    if (j == 1) {
      EXPECT_GE(r.adjusted_mutual_info(), -1.0);
      EXPECT_LE(r.adjusted_mutual_info(), 1.0);
    }
    EXPECT_NE(r.checkpoint().find("/stage" + std::to_string(j) + "/"), std::string::npos)
        << r.checkpoint();
    EXPECT_TRUE(std::filesystem::exists(r.checkpoint())) << r.checkpoint();
    checkpoints.push_back(r.checkpoint());
  }
  // Every stage alone and the concatenation, scored side by side.
  ASSERT_EQ(job->evaluation().stages_size(), 2);
  EXPECT_GT(job->evaluation().linear_probe_accuracy(), 0.2);

  // The concatenated embedding is as wide as the stages together (embed_dim 32 each).
  const std::string embedded = dir_.Sub("concat");
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--stage-checkpoint", checkpoints[0], "--stage-checkpoint",
                        checkpoints[1], "--limit", "50", "--out", embedded},
                       &out, {}, seconds(120)),
            0)
      << out;
  std::vector<int64_t> shape;
  auto rows = ReadNpyAsFloat32(embedded + "/embeddings-00000-of-00001.npy", &shape);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(shape, (std::vector<int64_t>{50, 64}));

  // One encoder per stage and the manifest; the files load.
  const std::string exported = dir_.Sub("export");
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"export", "--stage-checkpoint", checkpoints[0], "--stage-checkpoint",
                        checkpoints[1], "--format", "safetensors", "--out", exported},
                       &out, {}, seconds(120)),
            0)
      << out;
  auto manifest_text = ReadFileToString(exported + "/mcl-manifest.json");
  ASSERT_TRUE(manifest_text.ok());
  const auto manifest = nlohmann::json::parse(*manifest_text);
  EXPECT_EQ(manifest.value("width", 0), 64);
  ASSERT_EQ(manifest["stages"].size(), 2u);
  for (int j = 0; j < 2; ++j) {
    const std::string weights = manifest["stages"][j].value("weights", "");
    EXPECT_EQ(weights, exported + "/stage" + std::to_string(j) + "/model.safetensors");
    auto file = worker::ReadSafetensors(weights);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_FALSE(file->tensors.empty());
  }
}

TEST_F(MclJobTest, Kill9InStageOneResumesThereWithTheExactSteps) {
  TinyJob spec = TinyMclJob();
  spec.limit = 1024;
  spec.batch_size = 32;
  spec.epochs = 2;
  spec.max_steps_per_epoch = 12;  // both stages: 12 steps an epoch, 48 in all
  spec.heartbeat_timeout = 4;
  spec.collective_timeout = 8;
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->id();
  ASSERT_TRUE(WaitForStageStep(*cluster_, id, /*stage=*/1, /*epoch=*/1, /*step=*/3, seconds(300)))
      << cluster_->Logs();
  cluster_->worker(1).Signal(SIGKILL);
  cluster_->worker(1).Wait(seconds(10));
  ASSERT_TRUE(cluster_->StartWorker(1, WorkerEnv()).ok());

  auto done = cluster_->WaitForState(id, v1::JOB_STATE_SUCCEEDED, seconds(300));
  ASSERT_TRUE(done.ok()) << done.status().ToString() << "\n" << cluster_->Logs();
  auto job = cluster_->Get(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->progress().total_steps(), spec.TotalSteps());
  EXPECT_GE(job->restarts(), 1);
  // The restart stayed in stage 1: stage 0 trained and clustered once.
  int stage0_trained = 0, extractions = 0;
  for (const auto& h : job->history()) {
    stage0_trained += h.kind() == "round_trained" && h.round() == 0;
    extractions += h.kind() == "state" && h.state() == v1::JOB_STATE_EXTRACTING;
  }
  EXPECT_EQ(stage0_trained, 1);
  EXPECT_EQ(extractions, 2);
  ASSERT_EQ(job->rounds_size(), 2);
  EXPECT_EQ(job->rounds(1).epochs_committed(), 2);
  EXPECT_EQ(job->rounds(1).checkpoint_global_step(), spec.TotalSteps());
}

}  // namespace
}  // namespace mlcd::testing
