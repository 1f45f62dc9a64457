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
#include "tests/eval/make_generated.h"
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

// The other clustering engine and more than two ranks: a 2-stage job on a tiny generated
// Trifeature, clustered by the three workers' gang, evaluated on its three attributes for
// every stage alone and for the concatenation; `mlcd-worker eval --stage-checkpoint` by hand
// gives the same figures.
TEST_F(MclJobTest, GangEngineOnThreeRanksScoresEveryAttributePerStage) {
  ASSERT_TRUE(cluster_->StartWorker(2, WorkerEnv()).ok());
  ASSERT_TRUE(cluster_->WaitForIdleWorkers(3, seconds(30)).ok()) << cluster_->Logs();
  const std::string data = dir_.Sub("trifeature");
  ASSERT_TRUE(MakeGenerated(GeneratedKind::kTrifeature, data, 2, 240, 90).ok());
  const std::string dataset = "format: webdataset, index: " + data + "/train-index";
  std::string yaml = "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata:\n  name: mcl-gang\nspec:\n";
  yaml += "  dataset: {" + dataset + ", augment: false}\n";
  yaml += "  loss: {variant: infonce, temperature: 0.5}\n";
  yaml += "  clustering: {k: 2, engine: gang, niter: 4}\n";
  yaml +=
      "  model: {image_size: 32, patch_size: 8, channels: 3, width: 32, depth: 1, heads: 2, "
      "embed_dim: 32}\n";
  // K^N = 4 <= M / b = 240 / 30 = 8.
  yaml +=
      "  training: {world_size: 3, batch_size: 30, epochs_per_round: 1, threads_per_worker: 1, "
      "seed: 4, heartbeat_timeout_seconds: 30, collective_timeout_seconds: 30}\n";
  yaml += "  mcl: {stages: 2}\n";
  yaml += "  evaluation: {enabled: true, baselines: false, dataset: {" + dataset +
          ", test_index: " + data + "/test-index}}\n";
  auto submitted = cluster_->Submit(yaml);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = cluster_->WaitForJob(
      submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(400));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message() << "\n" << cluster_->Logs();
  // The third worker trained in the gang.
  EXPECT_FALSE(ProgressEvents(cluster_->WorkerDataDir(2)).empty());
  ASSERT_EQ(job->rounds_size(), 2);
  for (const v1::RoundStatus& r : job->rounds()) {
    // The gang clustered: the set holds every sample, in K clusters.
    ASSERT_EQ(r.cluster_sizes_size(), 2);
    EXPECT_EQ(std::accumulate(r.cluster_sizes().begin(), r.cluster_sizes().end(), uint64_t{0}),
              240u);
  }
  const v1::EvaluationResult& e = job->evaluation();
  auto expect_attributes = [](const v1::EvaluationResult& r, const std::string& what) {
    ASSERT_EQ(r.attributes_size(), 3) << what;
    EXPECT_EQ(r.attributes(0).name(), "shape") << what;
    EXPECT_EQ(r.attributes(1).name(), "texture") << what;
    EXPECT_EQ(r.attributes(2).name(), "colour") << what;
    for (const auto& a : r.attributes()) {
      EXPECT_EQ(a.num_classes(), 10) << what;
      EXPECT_GT(a.linear_probe_accuracy(), 0.0) << what << " " << a.name();
    }
  };
  expect_attributes(e, "the concatenation");
  ASSERT_EQ(e.stages_size(), 2);
  expect_attributes(e.stages(0), "stage 0");
  expect_attributes(e.stages(1), "stage 1");

  // By hand, from the job's spec and the stage checkpoints.
  const std::string spec_path = dir_.Sub("mcl-gang.yaml");
  ASSERT_TRUE(WriteFileAtomically(spec_path, yaml).ok());
  const std::string out_dir = dir_.Sub("eval-by-hand");
  std::string out;
  ASSERT_EQ(
      RunCommand(BinPath("mlcd-worker"),
                 {"eval", "--spec", spec_path, "--stage-checkpoint", job->rounds(0).checkpoint(),
                  "--stage-checkpoint", job->rounds(1).checkpoint(), "--out", out_dir},
                 &out, {}, seconds(300)),
      0)
      << out;
  auto text = ReadFileToString(out_dir + "/evaluation.json");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto by_hand = nlohmann::json::parse(*text);
  ASSERT_EQ(by_hand["attributes"].size(), 3u) << *text;
  // The same model on the same rows; the job's gang embedded them in other batches, whose
  // float rounding may move one test image across a decision boundary.
  const double one_image = 1.0 / 90;
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(
        by_hand["attributes"][a].value(
            "linearProbeAccuracy", by_hand["attributes"][a].value("linear_probe_accuracy", -1.0)),
        e.attributes(a).linear_probe_accuracy(), one_image + 1e-9)
        << *text;
  }
}

}  // namespace
}  // namespace mlcd::testing
