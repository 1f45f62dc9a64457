// Training on a given multi-label set with every objective (docs/loss.md), end to end with the
// real services on loopback: generated Fashion mosaics (`mlcdctl dataset make`), their
// ground-truth label sets imported with `mlcdctl labels import --jsonl`, then one job per
// objective PENDING -> TRAINING (two worker agents, Gloo) -> EVALUATING (the multi-label
// protocol, and for the label heads their own predictions) -> SUCCEEDED; the heads' exports.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"
#include "tests/eval/make_generated.h"
#include "worker/model/safetensors.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

constexpr int kTrain = 128;
constexpr int kTest = 64;
constexpr int kBatch = 32;
constexpr int kEpochs = 2;
constexpr int kStepsPerEpoch = kTrain / kBatch;

// A job on the mosaics under `dir` training `loss` (a YAML flow map) on the set `set`.
std::string MosaicJob(const std::string& name, const std::string& dir, const std::string& set,
                      const std::string& loss) {
  const std::string dataset =
      "format: webdataset, index: " + dir + "/train-index" + ", mean: [0.286], stddev: [0.353]";
  std::string y =
      "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata:\n  name: " + name + "\nspec:\n";
  y += "  dataset: {" + dataset + ", augment: false}\n";
  y += "  clustering: {label_set: " + set + "}\n";
  y += "  loss: " + loss + "\n";
  y += "  model: {image_size: 56, patch_size: 14, channels: 1, width: 32, depth: 1, heads: 2, "
       "embed_dim: 32}\n";
  y += "  training: {world_size: 2, batch_size: " + std::to_string(kBatch) +
       ", epochs_per_round: " + std::to_string(kEpochs) +
       ", threads_per_worker: 1, seed: 3, heartbeat_timeout_seconds: 30, "
       "collective_timeout_seconds: 30}\n";
  y += "  evaluation: {enabled: true, baselines: false, dataset: {" + dataset +
       ", test_index: " + dir + "/test-index}}\n";
  return y;
}

struct Objective {
  std::string name;
  std::string loss;
  bool head;  // bce and mulcon: a label head, its predictions scored and exported
};

class MultiLabelJobsTest : public TwoWorkerClusterTest {};

TEST_F(MultiLabelJobsTest, EveryObjectiveTrainsOnImportedSetsAndIsEvaluated) {
  const std::string mosaics = dir_.Sub("mosaics");
  ASSERT_TRUE(MakeGenerated(GeneratedKind::kFashionMosaic, mosaics, 5, kTrain, kTest).ok());
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"labels", "import", "--name", "mosaics/gt", "--k", "10", "--jsonl",
                        mosaics + "/train-labels.jsonl", "--index", mosaics + "/train-index"},
                       &out, {"MLCD_LABELSTORE=" + cluster_->labelstore_address()}, seconds(60)),
            0)
      << out;

  const std::vector<Objective> objectives = {
      {"bce", "{variant: bce}", true},
      {"mulcon", "{variant: mulcon, mulcon: {label_dim: 16, heads: 2, projection_dim: 8}}", true},
      {"mulsupcon", "{variant: mulsupcon, temperature: 0.2}", false},
      {"supcon-all", "{variant: supcon-all, temperature: 0.2}", false},
      {"supcon-any", "{variant: supcon-any, temperature: 0.2}", false},
      {"mlcd", "{variant: mlcd, sample_ratio: 1.0}", false},
  };
  for (const Objective& o : objectives) {
    SCOPED_TRACE(o.name);
    auto submitted = cluster_->Submit(MosaicJob(o.name, mosaics, "mosaics/gt", o.loss));
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    // The set's class count and labels per sample are the job's k and l.
    EXPECT_EQ(submitted->spec().clustering().k(), 10);
    EXPECT_EQ(submitted->spec().clustering().l(), 4);
    auto job = cluster_->WaitForJob(
        submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(300));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message() << "\n" << cluster_->Logs();
    // No clustering: one round on the given set, every step taken.
    ASSERT_EQ(job->rounds_size(), 1);
    EXPECT_EQ(job->rounds(0).label_set(), "mosaics/gt");
    EXPECT_FALSE(job->rounds(0).clustered());
    EXPECT_EQ(job->progress().total_steps(), kEpochs * kStepsPerEpoch);
    EXPECT_TRUE(std::isfinite(job->progress().loss()));

    ASSERT_TRUE(job->has_evaluation());
    const v1::EvaluationResult& e = job->evaluation();
    EXPECT_EQ(e.test_samples(), static_cast<uint64_t>(kTest));
    ASSERT_TRUE(e.has_multi_label());
    EXPECT_EQ(e.multi_label().num_labels(), 10);
    EXPECT_GT(e.multi_label().mean_average_precision(), 0.0);
    EXPECT_LE(e.multi_label().mean_average_precision(), 1.0);
    EXPECT_EQ(e.has_model_predictions(), o.head);
    if (o.head) {
      // The head's own logits, scored with the same metrics.
      EXPECT_EQ(e.model_predictions().num_labels(), 10);
      EXPECT_GT(e.model_predictions().mean_average_precision(), 0.0);
      EXPECT_GT(e.model_predictions().labels_scored(), 0);
    }

    if (!o.head) continue;
    // The export writes the head beside the backbone under its documented names.
    const std::string export_dir = dir_.Sub("export-" + o.name);
    ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                         {"export", "--checkpoint", job->rounds(0).checkpoint(), "--format",
                          "safetensors", "--out", export_dir + "/model.safetensors"},
                         &out, {}, seconds(120)),
              0)
        << out;
    auto head = worker::ReadSafetensors(export_dir + "/model.head.safetensors");
    ASSERT_TRUE(head.ok()) << head.status().ToString() << "\n" << out;
    if (o.name == "bce") {
      ASSERT_EQ(head->tensors.count("bce_head.weight"), 1u);
      EXPECT_EQ(head->tensors.at("bce_head.weight").shape, (std::vector<int64_t>{10, 32}));
      EXPECT_EQ(head->tensors.at("bce_head.bias").shape, (std::vector<int64_t>{10}));
    } else {
      ASSERT_EQ(head->tensors.count("mulcon_head.label_embeddings"), 1u);
      EXPECT_EQ(head->tensors.at("mulcon_head.label_embeddings").shape,
                (std::vector<int64_t>{10, 32}));
      EXPECT_EQ(head->metadata.at("mulcon_head.heads"), "2");
    }
  }
}

}  // namespace
}  // namespace mlcd::testing
