// `mlcd-worker embed` and `mlcd-worker eval` as real processes: a gang of 2 embeds the same
// rows as one process (sharded == unsharded), an evaluation gang of 2 over real Gloo gives
// the same result as one process, precomputed features evaluate like the library does, and
// bad input gets a clear error and a non-zero exit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <thread>

#include "common/file_util.h"
#include "common/net.h"
#include "tests/testing/process.h"
#include "worker/eval/features.h"

namespace mlcd::testing {
namespace {

using mlcd::worker::LoadLabelledFeatures;

const char* kSpec = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: eval-commands}
spec:
  dataset: {limit: 300}
  clustering: {k: 16, l: 4}
  model: {width: 32, depth: 1, heads: 2, embed_dim: 24}
  training: {batch_size: 64, seed: 5, threads_per_worker: 1}
  evaluation: {test_limit: 400}
)";

nlohmann::json ReadJson(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return nullptr;
  return nlohmann::json::parse(*text, nullptr, false);
}

class EvalCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(WriteFileAtomically(dir_.Sub("job.yaml"), kSpec).ok()); }
  std::string Spec() { return dir_.Sub("job.yaml"); }
  TempDir dir_;
};

TEST_F(EvalCommandsTest, EmbedShardedEqualsUnsharded) {
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", Spec(), "--out", dir_.Sub("one")}, &out),
            0)
      << out;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                         {"embed", "--spec", Spec(), "--out", dir_.Sub("two"), "--rank",
                          std::to_string(r), "--world-size", "2", "--batch-size", "50",
                          "--progress-jsonl", dir_.Sub("p.jsonl")},
                         &out),
              0)
        << out;
  }
  auto one = LoadLabelledFeatures({dir_.Sub("one")});
  auto two = LoadLabelledFeatures({dir_.Sub("two")});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_EQ(one->features.rows, 300);
  ASSERT_EQ(one->features.cols, 24);
  ASSERT_EQ(two->features.rows, 300);
  ASSERT_EQ(two->ids.size(), 300u);
  for (int64_t i = 0; i < 300; ++i) {
    EXPECT_EQ(two->ids[i], i);
    EXPECT_EQ(two->labels[i], one->labels[i]);
    double norm = 0;
    for (int64_t j = 0; j < 24; ++j) {
      EXPECT_NEAR(two->features.row(i)[j], one->features.row(i)[j], 1e-5) << "row " << i;
      norm += one->features.row(i)[j] * one->features.row(i)[j];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  // The progress file follows the contract the worker agent reads.
  std::ifstream in(dir_.Sub("p.jsonl"));
  std::string line;
  std::vector<nlohmann::json> events;
  while (std::getline(in, line)) events.push_back(nlohmann::json::parse(line));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["event"], "started");
  EXPECT_EQ(events.back()["event"], "finished");
  EXPECT_EQ(events.back()["outputs"][0], dir_.Sub("two") + "/embeddings-00001-of-00002.npy");
  EXPECT_EQ(events.back()["rows"], 150);
}

TEST_F(EvalCommandsTest, EvaluationGangOfTwoEqualsOneProcess) {
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"eval", "--spec", Spec(), "--random-init", "--out", dir_.Sub("w1"),
                        "--keep-embeddings"},
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("linear probe"), std::string::npos) << out;
  const int port = PickFreePort();
  ASSERT_GT(port, 0);
  const std::string rendezvous = "127.0.0.1:" + std::to_string(port);
  ChildProcess rank1;
  ASSERT_TRUE(rank1
                  .Start(BinPath("mlcd-worker"),
                         {"eval", "--spec", Spec(), "--random-init", "--out", dir_.Sub("w2"),
                          "--rank", "1", "--world-size", "2", "--rendezvous", rendezvous},
                         dir_.Sub("rank1.log"))
                  .ok());
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"eval", "--spec", Spec(), "--random-init", "--out", dir_.Sub("w2"),
                        "--rank", "0", "--world-size", "2", "--rendezvous", rendezvous,
                        "--keep-embeddings", "--progress-jsonl", dir_.Sub("p.jsonl")},
                       &out),
            0)
      << out << rank1.Log();
  EXPECT_EQ(rank1.Wait(std::chrono::seconds(30)), 0) << rank1.Log();

  nlohmann::json a = ReadJson(dir_.Sub("w1/evaluation.json")),
                 b = ReadJson(dir_.Sub("w2/evaluation.json"));
  ASSERT_TRUE(a.is_object());
  ASSERT_TRUE(b.is_object());
  EXPECT_EQ(a["train_samples"], "300");
  EXPECT_EQ(a["test_samples"], "400");
  // The embeddings agree to float rounding (batches differ); the probe of a random-init model
  // picks a weak λ whose fit stops at the iteration cap, so its accuracy may move by a few
  // test images; kNN is exact.
  EXPECT_NEAR(a["linear_probe_accuracy"].get<double>(), b["linear_probe_accuracy"].get<double>(),
              0.02);
  EXPECT_EQ(a["knn_accuracy"], b["knn_accuracy"]);
  EXPECT_GT(a["linear_probe_accuracy"].get<double>(), 0.3);  // 10 classes: chance is 0.1
  EXPECT_GT(a["knn_accuracy"].get<double>(), 0.3);
  auto e1 = LoadLabelledFeatures({dir_.Sub("w1/test")});
  auto e2 = LoadLabelledFeatures({dir_.Sub("w2/test")});
  ASSERT_TRUE(e1.ok() && e2.ok());
  ASSERT_EQ(e1->features.values.size(), e2->features.values.size());
  for (size_t i = 0; i < e1->features.values.size(); ++i)
    ASSERT_NEAR(e1->features.values[i], e2->features.values[i], 1e-5) << i;
  EXPECT_EQ(e1->labels, e2->labels);

  // The embedded splits evaluated as precomputed features give the same numbers.
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"eval", "--train-features", dir_.Sub("w1/train"), "--test-features",
                        dir_.Sub("w1/test"), "--output", "json"},
                       &out),
            0)
      << out;
  auto brace = out.find("{\n");
  ASSERT_NE(brace, std::string::npos) << out;
  nlohmann::json j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["evaluation"]["linear_probe_accuracy"], a["linear_probe_accuracy"]);
  EXPECT_EQ(j["evaluation"]["knn_accuracy"], a["knn_accuracy"]);

  // The progress file carries the result for the worker agent.
  std::ifstream in(dir_.Sub("p.jsonl"));
  std::string line, last;
  while (std::getline(in, line)) last = line;
  nlohmann::json finished = nlohmann::json::parse(last);
  EXPECT_EQ(finished["event"], "finished");
  EXPECT_EQ(finished["evaluation"]["linear_probe_accuracy"], b["linear_probe_accuracy"]);
}

TEST_F(EvalCommandsTest, BadInputIsAClearError) {
  std::string out;
  EXPECT_NE(RunCommand(BinPath("mlcd-worker"), {"eval", "--spec", Spec()}, &out), 0);
  EXPECT_NE(out.find("--random-init"), std::string::npos) << out;
  EXPECT_NE(RunCommand(BinPath("mlcd-worker"), {"eval", "--checkpoint", dir_.Sub("nope")}, &out),
            0);
  EXPECT_NE(out.find("nope"), std::string::npos) << out;
  EXPECT_NE(
      RunCommand(BinPath("mlcd-worker"), {"eval", "--train-features", dir_.Sub("x.npy")}, &out), 0);
  EXPECT_NE(out.find("both splits"), std::string::npos) << out;
  EXPECT_NE(RunCommand(BinPath("mlcd-worker"), {"embed", "--spec", Spec()}, &out), 0);
  EXPECT_NE(out.find("--out"), std::string::npos) << out;
  EXPECT_NE(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", Spec(), "--out", dir_.Sub("e"), "--rank", "2",
                        "--world-size", "2"},
                       &out),
            0);
  EXPECT_NE(out.find("outside"), std::string::npos) << out;
  EXPECT_NE(RunCommand(BinPath("mlcdctl"), {"eval"}, &out), 0);
  EXPECT_NE(out.find("--checkpoint"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlcd::testing
