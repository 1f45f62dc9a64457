// The evaluation inside a real job: the coordinator's tiny integration job (real
// mlcd-labelstore, mlcd-clusterd, mlcd-coordinator and two `mlcd-worker agent` slots) with two
// rounds and evaluation on. Round 1 re-clusters features the gang extracted with the round-0
// model (EXTRACTING -> `mlcd-worker embed`); the job ends with EVALUATING (`mlcd-worker eval`),
// whose result is stored with the job and shown by `mlcdctl get` and `mlcdctl eval --job`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "common/file_util.h"
#include "tests/coordinator/harness.h"
#include "tests/eval/make_generated.h"
#include "worker/eval/features.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// The services and two idle worker slots.
void StartCluster(TestCluster* cluster) {
  ASSERT_TRUE(cluster->StartServices().ok()) << cluster->Logs();
  ASSERT_TRUE(cluster->StartWorker(0).ok());
  ASSERT_TRUE(cluster->StartWorker(1).ok());
  ASSERT_TRUE(cluster->WaitForIdleWorkers(2, seconds(60)).ok()) << cluster->Logs();
}

TEST(EvalJobTest, TwoRoundJobExtractsFeaturesAndStoresItsEvaluation) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_NO_FATAL_FAILURE(StartCluster(&cluster));

  TinyJob spec;
  spec.name = "tiny-eval";
  spec.rounds = 2;
  spec.evaluation = true;
  spec.eval_test_limit = 1000;
  auto submitted = cluster.Submit(spec.Yaml(), "eval-job-test");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto done = cluster.WaitForJob(
      submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(400));
  ASSERT_TRUE(done.ok()) << done.status().ToString() << cluster.Logs();
  auto job = cluster.Get(submitted->id(), true);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message() << cluster.Logs();

  std::vector<v1::JobState> transitions;
  for (const auto& h : job->history())
    if (h.kind() == "state") transitions.push_back(h.state());
  EXPECT_EQ(transitions,
            (std::vector<v1::JobState>{
                v1::JOB_STATE_CLUSTERING, v1::JOB_STATE_ASSIGNING, v1::JOB_STATE_TRAINING,
                v1::JOB_STATE_EXTRACTING, v1::JOB_STATE_CLUSTERING, v1::JOB_STATE_ASSIGNING,
                v1::JOB_STATE_TRAINING, v1::JOB_STATE_EVALUATING, v1::JOB_STATE_SUCCEEDED}));

  // Round 1 clustered the round-0 model's own embeddings, extracted by the gang of 2.
  ASSERT_EQ(job->rounds_size(), 2);
  const auto& r1 = job->rounds(1);
  EXPECT_NE(r1.feature_source().find("model"), std::string::npos) << r1.feature_source();
  ASSERT_EQ(r1.feature_paths_size(), 2);
  std::vector<std::string> shards(r1.feature_paths().begin(), r1.feature_paths().end());
  auto features = worker::LoadLabelledFeatures(shards);
  ASSERT_TRUE(features.ok()) << features.status().ToString();
  EXPECT_EQ(features->features.rows, spec.limit);
  EXPECT_EQ(features->features.cols, 32);
  ASSERT_EQ(features->ids.size(), static_cast<size_t>(spec.limit));
  for (int64_t i = 0; i < spec.limit; ++i) {
    ASSERT_EQ(features->ids[i], i);
    double norm = 0;
    for (int64_t j = 0; j < 32; ++j)
      norm += features->features.row(i)[j] * features->features.row(i)[j];
    ASSERT_NEAR(norm, 1.0, 1e-4);
  }
  EXPECT_EQ(r1.assign().num_samples(), static_cast<uint64_t>(spec.limit));

  // The evaluation is stored with the job.
  ASSERT_TRUE(job->has_evaluation());
  const auto& e = job->evaluation();
  EXPECT_EQ(e.train_samples(), static_cast<uint64_t>(spec.limit));
  EXPECT_EQ(e.test_samples(), 1000u);
  EXPECT_GT(e.linear_probe_accuracy(), 0.3);  // 10 classes: chance is 0.1
  EXPECT_LE(e.linear_probe_accuracy(), 1.0);
  EXPECT_GT(e.knn_accuracy(), 0.3);
  EXPECT_GT(e.linear_probe_lambda(), 0);
  EXPECT_EQ(e.checkpoint(), job->checkpoint());
  EXPECT_GT(e.seconds(), 0);
  // Fig. 3 quantities from the label store and the checkpoint's centres.
  EXPECT_NE(e.mean_positive_cosine(), 0);
  EXPECT_NE(e.mean_negative_cosine(), 0);
  EXPECT_GT(e.mean_positive_cosine(), e.mean_negative_cosine());
  EXPECT_LE(std::abs(e.mean_positive_cosine()), 1.0);

  const std::string flag = "--coordinator=" + cluster.coordinator_address();
  std::string out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "get", job->id()}, &out), 0) << out;
  EXPECT_NE(out.find("linear probe"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "-o", "json", "eval", "--job", job->id()}, &out),
            0)
      << out;
  EXPECT_NE(out.find("\"linear_probe_accuracy\""), std::string::npos) << out;
  // Re-evaluating the job's checkpoint on this machine (mlcdctl runs mlcd-worker eval).
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"),
                       {flag, "--labelstore=" + cluster.labelstore_address(), "eval", "--job",
                        job->id(), "--rerun", "--out", dir.Sub("rerun")},
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("linear probe"), std::string::npos) << out;
  auto rerun = ReadFileToString(dir.Sub("rerun/evaluation.json"));
  ASSERT_TRUE(rerun.ok());
  EXPECT_NE(rerun->find("\"test_samples\": \"1000\""), std::string::npos) << *rerun;

  // The probe on other features of the same model (DINO's last-blocks features): wider rows,
  // and the Fig. 3 cosines still come from the embedding, so they equal the job's.
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"),
                       {flag, "--labelstore=" + cluster.labelstore_address(), "eval", "--job",
                        job->id(), "--rerun", "--features", "blocks", "--out", dir.Sub("blocks")},
                       &out),
            0)
      << out;
  auto blocks = ReadFileToString(dir.Sub("blocks/evaluation-details.json"));
  ASSERT_TRUE(blocks.ok());
  nlohmann::json details = nlohmann::json::parse(*blocks, nullptr, false);
  ASSERT_TRUE(details.is_object()) << *blocks;
  EXPECT_EQ(details["features"], "blocks");
  EXPECT_EQ(details["feature_blocks"], 1);      // default min(4, depth 1)
  EXPECT_EQ(details["embedding_dim"], 2 * 32);  // class token + mean patch token, width 32
  ASSERT_TRUE(details.contains("fig3")) << *blocks;
  EXPECT_NEAR(details["fig3"]["mean_positive_cosine"].get<double>(), e.mean_positive_cosine(),
              1e-5);
  EXPECT_NEAR(details["fig3"]["mean_negative_cosine"].get<double>(), e.mean_negative_cosine(),
              1e-5);
  EXPECT_GT(details["linear_probe"]["test_accuracy"].get<double>(), 0.3);
  EXPECT_NE(RunCommand(BinPath("mlcdctl"),
                       {flag, "eval", "--job", job->id(), "--rerun", "--features", "blocks",
                        "--feature-blocks", "2"},
                       &out),
            0);
  EXPECT_NE(out.find("outside [1, model depth 1]"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "eval", "--job", "no-such-job"}, &out), 3) << out;
}

// A job evaluated on an annotated dataset (generated Fashion mosaics, label sets and no single
// class): EVALUATING runs the multi-label protocol for the model and both baselines, the job
// stores it, and `mlcdctl get` prints the table.
TEST(EvalJobTest, MultiLabelEvaluationIsStoredAndShown) {
  TempDir dir;
  ASSERT_TRUE(MakeGenerated(GeneratedKind::kFashionMosaic, dir.Sub("mosaics"), 4, 80, 40).ok());
  TestCluster cluster(dir);
  ASSERT_NO_FATAL_FAILURE(StartCluster(&cluster));

  TinyJob spec;
  spec.name = "tiny-multi-label-eval";
  spec.evaluation = true;
  std::string yaml = spec.Yaml();
  // The evaluation dataset: the mosaics, decoded at the model's 28 x 28.
  yaml.insert(yaml.rfind('}'),
              ", dataset: {format: webdataset, index: " + dir.Sub("mosaics/train-index") +
                  ", test_index: " + dir.Sub("mosaics/test-index") +
                  ", mean: [0.286], stddev: [0.353]}");
  auto submitted = cluster.Submit(yaml, "multi-label-eval-job-test");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString() << "\n" << yaml;
  auto done = cluster.WaitForJob(
      submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(400));
  ASSERT_TRUE(done.ok()) << done.status().ToString() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message() << cluster.Logs();
  ASSERT_TRUE(done->has_evaluation());
  const auto& e = done->evaluation();
  EXPECT_EQ(e.test_samples(), 40u);
  ASSERT_TRUE(e.has_multi_label());
  EXPECT_EQ(e.multi_label().num_labels(), 10);
  EXPECT_GT(e.multi_label().mean_average_precision(), 0);
  EXPECT_EQ(e.linear_probe_accuracy(), 0);  // no single class
  ASSERT_EQ(e.baselines_size(), 2);
  for (const auto& b : e.baselines()) EXPECT_TRUE(b.has_multi_label()) << b.name();

  std::string out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"--coordinator=" + cluster.coordinator_address(), "get", done->id()}, &out),
            0)
      << out;
  EXPECT_NE(out.find("multi-label"), std::string::npos) << out;
  EXPECT_NE(out.find("10 labels"), std::string::npos) << out;
  EXPECT_NE(out.find("raw pixels"), std::string::npos) << out;
  // No single-label figures where the dataset has no classes.
  EXPECT_EQ(out.find("linear probe"), std::string::npos) << out;
  EXPECT_NE(out.find("multi-label mAP"), std::string::npos) << out;  // the job's message
}

}  // namespace
}  // namespace mlcd::testing
