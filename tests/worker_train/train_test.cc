// `mlcd-worker train` as real processes (Gloo over loopback, a real mlcd-labelstore, labels
// from real FAISS k-means of Fashion-MNIST pixels): the loss falls, progress events follow
// the contract, resuming gives the same next losses as not stopping, a checkpoint written by
// 2 ranks continues on 3, a dead peer fails the gang, bad inputs get clear errors. Plus the
// Trainer in-process with its /metrics.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <thread>

#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "tests/testing/http.h"
#include "tests/worker_train/train_testing.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/trainer.h"

namespace mlcd::worker {
namespace {

using mlcd::testing::HttpGet;

using mlcd::testing::BinPath;
using mlcd::testing::ChildProcess;
using mlcd::testing::TempDir;
using nlohmann::json;

class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    store_ = new train_testing::LabelStoreProcess();
    Status st = store_->Start(*dir_);
    ASSERT_TRUE(st.ok()) << st.ToString() << store_->process().Log();
    // 16 clusters of 480 images, 2 labels each; one set with a hole for the error tests.
    st = train_testing::WriteKMeansLabelSet(store_->address(), "test/r0", 480, 16, 2);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static void TearDownTestSuite() {
    delete store_;
    delete dir_;
  }

  // Starts rank `rank` of `world` with the spec file and extra flags; progress to a file.
  void StartRank(ChildProcess* p, const std::string& name, int rank, int world,
                 const std::string& spec, const std::string& rendezvous,
                 std::vector<std::string> extra) {
    std::vector<std::string> args = {"train",
                                     "--spec",
                                     spec,
                                     "--rank",
                                     std::to_string(rank),
                                     "--world-size",
                                     std::to_string(world),
                                     "--labelstore",
                                     store_->address(),
                                     "--label-set",
                                     "test/r0",
                                     "--progress-jsonl",
                                     Events(name, rank),
                                     "--log-every",
                                     "1"};
    if (world > 1) args.insert(args.end(), {"--rendezvous", rendezvous});
    args.insert(args.end(), extra.begin(), extra.end());
    Status st = p->Start(BinPath("mlcd-worker"), args,
                         dir_->Sub(name + ".r" + std::to_string(rank) + ".log"));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::string Events(const std::string& name, int rank) {
    return dir_->Sub(name + ".r" + std::to_string(rank) + ".jsonl");
  }
  // Runs a gang of `world` ranks to completion; every rank must exit 0.
  void RunGang(const std::string& name, int world, const std::string& spec,
               std::vector<std::string> extra) {
    const std::string rendezvous = "127.0.0.1:" + std::to_string(PickFreePort());
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<ChildProcess>());
      StartRank(ranks.back().get(), name, r, world, spec, rendezvous, extra);
    }
    for (int r = 0; r < world; ++r) {
      int status = ranks[static_cast<size_t>(r)]->Wait(std::chrono::seconds(240));
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << name << " rank " << r << " status " << status << "\n"
          << ranks[static_cast<size_t>(r)]->Log();
    }
  }
  std::string Spec(const std::string& name, const v1::JobSpec& spec) {
    const std::string path = dir_->Sub(name + ".spec.json");
    EXPECT_TRUE(train_testing::WriteSpecJson(path, spec).ok());
    return path;
  }
  // global_step -> loss of a run's progress events.
  std::map<int64_t, double> Losses(const std::string& name, int rank = 0) {
    std::map<int64_t, double> out;
    for (const auto& e :
         train_testing::EventsOf(train_testing::ReadEvents(Events(name, rank)), "progress")) {
      out[e["global_step"].get<int64_t>()] = e["loss"].get<double>();
    }
    return out;
  }

  static TempDir* dir_;
  static train_testing::LabelStoreProcess* store_;
};
TempDir* TrainTest::dir_ = nullptr;
train_testing::LabelStoreProcess* TrainTest::store_ = nullptr;

TEST_F(TrainTest, LossFallsAndEventsFollowTheContract) {
  // 480 images, batch 48: 10 steps per epoch, 4 epochs. Driven by an Assignment (the
  // coordinator's path), with the checkpoint root taken from it.
  v1::JobSpec spec = train_testing::TinySpec(480, 16, 2, 48, 4);
  std::string spec_json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(spec, &spec_json).ok());
  const std::string assignment = dir_->Sub("falls.assignment.json");
  const std::string ckpt = dir_->Sub("falls.ckpt");
  ASSERT_TRUE(WriteFileAtomically(assignment,
                                  "{\"id\":\"a1\",\"rank\":0,\"worldSize\":1,\"round\":0,"
                                  "\"firstEpoch\":0,\"endEpoch\":4,\"labelSet\":\"test/r0\","
                                  "\"labelstoreAddress\":\"" +
                                      store_->address() + "\",\"checkpointDir\":\"" + ckpt +
                                      "\",\"spec\":" + spec_json + "}")
                  .ok());
  std::string out;
  int rc = mlcd::testing::RunCommand(
      BinPath("mlcd-worker"), {"train", "--assignment", assignment, "--progress-jsonl", "-"}, &out);
  ASSERT_EQ(rc, 0) << out;
  std::vector<json> events;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') events.push_back(json::parse(line));
  }
  ASSERT_FALSE(events.empty()) << out;
  EXPECT_EQ(events.front()["event"], "started");
  EXPECT_EQ(events.front()["steps_per_epoch"], 10);
  EXPECT_EQ(events.front()["job_total_steps"], 40);
  EXPECT_EQ(events.front()["world_size"], 1);
  auto progress = train_testing::EventsOf(events, "progress");
  ASSERT_EQ(progress.size(), 40u);
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_EQ(progress[i]["global_step"], static_cast<int64_t>(i + 1));
    EXPECT_EQ(progress[i]["epoch"], static_cast<int>(i / 10));
    EXPECT_EQ(progress[i]["step_in_epoch"], static_cast<int>(i % 10 + 1));
    EXPECT_GT(progress[i]["samples_per_second"].get<double>(), 0);
  }
  auto checkpoints = train_testing::EventsOf(events, "checkpoint");
  ASSERT_EQ(checkpoints.size(), 4u);
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(checkpoints[static_cast<size_t>(e)]["epoch"], e);
    EXPECT_EQ(checkpoints[static_cast<size_t>(e)]["epoch_complete"], true);
    EXPECT_EQ(checkpoints[static_cast<size_t>(e)]["global_step"], 10 * (e + 1));
  }
  const json finished = events.back();
  EXPECT_EQ(finished["event"], "finished");
  EXPECT_EQ(finished["global_step"], 40);
  const std::string last = finished["checkpoint"].get<std::string>();
  EXPECT_EQ(last, ckpt + "/ckpt-r0-e3-s10");
  EXPECT_TRUE(PathExists(last + "/meta.json"));
  EXPECT_EQ(ReadFileToString(ckpt + "/LATEST").value(), "ckpt-r0-e3-s10\n");
  // Only the newest 3 are kept by default.
  EXPECT_FALSE(PathExists(ckpt + "/ckpt-r0-e0-s10"));

  auto mean = [&](size_t begin, size_t end, const char* key) {
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += progress[i][key].get<double>();
    return s / static_cast<double>(end - begin);
  };
  const double first = mean(0, 5, "loss"), last_loss = mean(35, 40, "loss");
  EXPECT_LT(last_loss, 0.85 * first)
      << "loss did not fall: first steps " << first << ", last steps " << last_loss;
  EXPECT_GT(mean(35, 40, "mean_positive_cosine"), mean(0, 5, "mean_positive_cosine") + 0.05);
}

TEST_F(TrainTest, ResumeGivesTheSameNextLossesAsNotStopping) {
  // 288 images, batch 48: 6 steps per epoch, 2 epochs; checkpoints every 2 steps.
  v1::JobSpec spec = train_testing::TinySpec(288, 16, 2, 48, 2);
  spec.mutable_training()->set_checkpoint_every_steps(2);
  const std::string path = Spec("resume", spec);
  const std::string ckpt = dir_->Sub("resume.ckpt");
  RunGang("resume.full", 1, path, {"--checkpoint-dir", ckpt, "--keep-checkpoints", "0"});
  auto full = Losses("resume.full");
  ASSERT_EQ(full.size(), 12u);

  // From the middle of epoch 0 (4 steps done).
  RunGang("resume.mid", 1, path,
          {"--checkpoint-dir", dir_->Sub("resume.mid.ckpt"), "--resume", ckpt + "/ckpt-r0-e0-s4"});
  auto mid = Losses("resume.mid");
  ASSERT_EQ(mid.size(), 8u);
  for (const auto& [step, loss] : mid) {
    ASSERT_TRUE(full.count(step)) << step;
    EXPECT_NEAR(loss, full[step], 1e-5 * std::max(1.0, std::abs(loss))) << "global step " << step;
  }
  EXPECT_EQ(mid.begin()->first, 5);
  // From the end of epoch 0 (the coordinator's next assignment: epochs [1, 2)).
  RunGang("resume.epoch", 1, path,
          {"--checkpoint-dir", dir_->Sub("resume.epoch.ckpt"), "--resume", ckpt + "/ckpt-r0-e0-s6",
           "--first-epoch", "1", "--end-epoch", "2"});
  auto next = Losses("resume.epoch");
  ASSERT_EQ(next.size(), 6u);
  for (const auto& [step, loss] : next)
    EXPECT_NEAR(loss, full[step], 1e-5 * std::max(1.0, std::abs(loss))) << step;
}

TEST_F(TrainTest, TwoRankCheckpointContinuesOnThreeRanks) {
  // r = 1 (every class sampled) so the loss does not depend on how classes are sharded.
  v1::JobSpec spec = train_testing::TinySpec(288, 16, 2, 48, 2, /*sample_ratio=*/1.0);
  const std::string path = Spec("reshard", spec);
  const std::string ckpt2 = dir_->Sub("reshard.ckpt2");
  RunGang("reshard.w2", 2, path, {"--checkpoint-dir", ckpt2, "--keep-checkpoints", "0"});
  auto w2 = Losses("reshard.w2");
  ASSERT_EQ(w2.size(), 12u);
  EXPECT_EQ(w2, Losses("reshard.w2", 1));  // every rank reports the global loss
  // The 2-rank checkpoint holds two class ranges.
  int ranges = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt2 + "/ckpt-r0-e0-s6")) {
    const std::string f = entry.path().filename().string();
    ranges +=
        f.rfind("class_centres.", 0) == 0 && f.size() > 5 && f.substr(f.size() - 5) == ".json";
  }
  EXPECT_EQ(ranges, 2);

  const std::string ckpt3 = dir_->Sub("reshard.ckpt3");
  RunGang("reshard.w3", 3, path,
          {"--checkpoint-dir", ckpt3, "--resume", ckpt2 + "/ckpt-r0-e0-s6", "--first-epoch", "1"});
  auto w3 = Losses("reshard.w3");
  ASSERT_EQ(w3.size(), 6u);
  for (const auto& [step, loss] : w3) {
    EXPECT_NEAR(loss, w2[step], 2e-4 * std::max(1.0, std::abs(loss))) << "global step " << step;
  }
  ranges = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt3 + "/ckpt-r0-e1-s6")) {
    const std::string f = entry.path().filename().string();
    ranges += f.rfind("class_centres.", 0) == 0 && f.substr(f.size() - 5) == ".json";
  }
  EXPECT_EQ(ranges, 3);
}

TEST_F(TrainTest, NewRoundStartsFromTheBackboneWithFreshCentres) {
  // Round 1 of a 2-round job resumes round 0's backbone; its first loss is that of fresh
  // (untrained) centres, and the global step continues from round 0's end.
  v1::JobSpec spec = train_testing::TinySpec(288, 16, 2, 48, 1);
  spec.mutable_training()->set_rounds(2);
  const std::string path = Spec("rounds", spec);
  const std::string ckpt = dir_->Sub("rounds.ckpt");
  RunGang("rounds.r0", 1, path, {"--checkpoint-dir", ckpt});
  RunGang("rounds.r1", 1, path, {"--checkpoint-dir", ckpt, "--resume", ckpt, "--round", "1"});
  auto r0 = Losses("rounds.r0");
  auto r1 = Losses("rounds.r1");
  ASSERT_EQ(r0.size(), 6u);
  ASSERT_EQ(r1.size(), 6u);
  EXPECT_EQ(r1.begin()->first, 7);
  auto events = train_testing::ReadEvents(Events("rounds.r1", 0));
  EXPECT_EQ(events.front()["job_total_steps"], 12);
  EXPECT_EQ(events.back()["checkpoint"], ckpt + "/ckpt-r1-e0-s6");
}

// Rounds that clustered the model's own embeddings start their class centres at the round's
// k-means centroids (training.centre_init "auto"); round 0 on pixels keeps random centres, and
// "centroids" with a file of the wrong shape is refused.
TEST_F(TrainTest, ModelFeatureRoundsStartTheirCentresAtTheCentroids) {
  v1::JobSpec spec = train_testing::TinySpec(288, 16, 2, 48, 1);
  spec.mutable_training()->set_rounds(2);
  spec.mutable_optimizer()->set_lr(1e-12);  // the centres stay where they started
  const std::string path = Spec("centroids", spec);
  // 16 unit rows of dimension 32 (embed_dim of TinySpec).
  const int64_t k = 16, d = 32;
  std::vector<float> centroids(static_cast<size_t>(k * d));
  for (int64_t c = 0; c < k; ++c) {
    double norm = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double v =
          std::sin(0.7 * static_cast<double>(c * d + j) + 0.3 * static_cast<double>(c));
      centroids[static_cast<size_t>(c * d + j)] = static_cast<float>(v);
      norm += v * v;
    }
    for (int64_t j = 0; j < d; ++j)
      centroids[static_cast<size_t>(c * d + j)] /= static_cast<float>(std::sqrt(norm));
  }
  const std::string centroids_path = dir_->Sub("centroids.npy");
  ASSERT_TRUE(WriteNpy(centroids_path, NpyDtype::kFloat32, {k, d}, centroids.data()).ok());
  // The class centres of the newest checkpoint under `root`, assembled from the ranks' ranges.
  auto saved_centres = [&](const std::string& root) {
    std::string latest = ReadFileToString(root + "/LATEST").value();
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back())))
      latest.pop_back();
    std::vector<float> all(static_cast<size_t>(k * d), NAN);
    for (const auto& entry : std::filesystem::directory_iterator(root + "/" + latest)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("class_centres.", 0) != 0 || name.find(".weight.npy") == std::string::npos)
        continue;
      const int64_t begin = std::stoll(name.substr(std::string("class_centres.").size(), 12));
      auto rows = ReadNpyAsFloat32(entry.path().string());
      EXPECT_TRUE(rows.ok()) << rows.status().ToString();
      if (rows.ok()) std::copy(rows->begin(), rows->end(), all.begin() + begin * d);
    }
    return all;
  };
  // Largest difference between the saved rows, normalised, and the centroids.
  auto max_difference = [&](const std::vector<float>& saved) {
    double worst = 0;
    for (int64_t c = 0; c < k; ++c) {
      double norm = 0;
      for (int64_t j = 0; j < d; ++j)
        norm += saved[static_cast<size_t>(c * d + j)] * saved[static_cast<size_t>(c * d + j)];
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = static_cast<size_t>(c * d + j);
        const double diff = std::abs(saved[i] / std::sqrt(norm) - centroids[i]);
        worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
      }
    }
    return worst;
  };
  const std::string ckpt1 = dir_->Sub("centroids.r1.ckpt");
  RunGang("centroids.r1", 2, path,
          {"--checkpoint-dir", ckpt1, "--round", "1", "--centroids", centroids_path});
  EXPECT_LT(max_difference(saved_centres(ckpt1)), 1e-5);

  const std::string ckpt0 = dir_->Sub("centroids.r0.ckpt");
  RunGang("centroids.r0", 1, path, {"--checkpoint-dir", ckpt0, "--centroids", centroids_path});
  const double random_difference = max_difference(saved_centres(ckpt0));
  EXPECT_GT(random_difference, 0.1);
  EXPECT_TRUE(std::isfinite(random_difference));

  spec.mutable_training()->set_centre_init("centroids");
  const std::string strict = Spec("centroids.strict", spec);
  const std::string narrow_path = dir_->Sub("centroids.narrow.npy");
  ASSERT_TRUE(WriteNpy(narrow_path, NpyDtype::kFloat32, {16, 8}, centroids.data()).ok());
  ChildProcess p;
  StartRank(&p, "centroids.strict", 0, 1, strict, "", {"--round", "1", "--centroids", narrow_path});
  int status = p.Wait(std::chrono::seconds(120));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << "\n" << p.Log();
  EXPECT_NE(p.Log().find("holds 16 x 8 centroids but the class centres are 16 x 32"),
            std::string::npos)
      << p.Log();
}

TEST_F(TrainTest, ADeadPeerFailsTheGangWithAnError) {
  v1::JobSpec spec = train_testing::TinySpec(480, 16, 2, 48, 50);
  spec.mutable_training()->set_collective_timeout_seconds(20);
  const std::string path = Spec("dead", spec);
  const std::string rendezvous = "127.0.0.1:" + std::to_string(PickFreePort());
  ChildProcess r0, r1;
  StartRank(&r0, "dead", 0, 2, path, rendezvous, {});
  StartRank(&r1, "dead", 1, 2, path, rendezvous, {});
  // Wait for training to be under way, then kill rank 1.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (train_testing::EventsOf(train_testing::ReadEvents(Events("dead", 1)), "progress").size() <
         2) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << r1.Log();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  r1.Signal(SIGKILL);
  int status = r0.Wait(std::chrono::seconds(60));
  ASSERT_NE(status, -1) << "rank 0 hung after its peer died\n" << r0.Log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << r0.Log();
  auto errors = train_testing::EventsOf(train_testing::ReadEvents(Events("dead", 0)), "error");
  ASSERT_EQ(errors.size(), 1u) << r0.Log();
  EXPECT_FALSE(errors[0]["message"].get<std::string>().empty());
}

TEST_F(TrainTest, BadInputsGetClearErrors) {
  struct Case {
    const char* name;
    v1::JobSpec spec;
    std::vector<std::string> args;
    std::string expect;
  };
  v1::JobSpec ok = train_testing::TinySpec(480, 16, 2, 48, 1);
  v1::JobSpec odd_batch = ok;
  odd_batch.mutable_training()->set_batch_size(50);
  v1::JobSpec wrong_k = ok;
  wrong_k.mutable_clustering()->set_k(20);
  v1::JobSpec too_many = ok;
  too_many.mutable_dataset()->set_limit(600);
  std::vector<Case> cases = {
      {"odd_batch",
       odd_batch,
       {"--world-size", "3", "--rendezvous", "127.0.0.1:1"},
       "divisible by world_size"},
      {"wrong_k", wrong_k, {}, "k=16"},
      {"too_many", too_many, {}, "holds labels for 480 samples"},
      {"no_set", ok, {"--label-set", "test/none"}, "NOT_FOUND"},
      {"bad_round", ok, {"--round", "3"}, "--round 3"},
  };
  for (auto& c : cases) {
    std::vector<std::string> args = {"train",
                                     "--spec",
                                     Spec(c.name, c.spec),
                                     "--labelstore",
                                     store_->address(),
                                     "--progress-jsonl",
                                     dir_->Sub(std::string(c.name) + ".jsonl")};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (std::find(args.begin(), args.end(), "--label-set") == args.end())
      args.insert(args.end(), {"--label-set", "test/r0"});
    std::string out;
    int rc = mlcd::testing::RunCommand(BinPath("mlcd-worker"), args, &out);
    EXPECT_EQ(rc, 1) << c.name << ": " << out;
    auto errors = train_testing::EventsOf(
        train_testing::ReadEvents(dir_->Sub(std::string(c.name) + ".jsonl")), "error");
    ASSERT_EQ(errors.size(), 1u) << c.name << ": " << out;
    EXPECT_NE(errors[0]["message"].get<std::string>().find(c.expect), std::string::npos)
        << c.name << ": " << errors[0]["message"];
  }
  std::string out;
  EXPECT_EQ(mlcd::testing::RunCommand(BinPath("mlcd-worker"),
                                      {"train", "--spec", dir_->Sub("missing.json")}, &out),
            1);
  EXPECT_NE(out.find("missing.json"), std::string::npos) << out;
  const std::string garbage = dir_->Sub("garbage.json");
  ASSERT_TRUE(WriteFileAtomically(garbage, "{\"training\": {\"batch_size\": \"many\"}}").ok());
  EXPECT_EQ(mlcd::testing::RunCommand(BinPath("mlcd-worker"), {"train", "--spec", garbage}, &out),
            1);
  EXPECT_NE(out.find("mlcd.v1.JobSpec"), std::string::npos) << out;
}

TEST(LoadJobSpecFileTest, YamlAndJsonFormsAgreeAndErrorsNameTheFile) {
  TempDir dir;
  const std::string yaml = dir.Sub("job.yaml");
  ASSERT_TRUE(WriteFileAtomically(
                  yaml,
                  "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: t}\nspec:\n"
                  "  dataset: {limit: 480}\n  clustering: {k: 16, l: 2}\n"
                  "  model: {preset: vit-tiny, width: 32, depth: 1, heads: 2, embed_dim: 32}\n"
                  "  training: {batch_size: 48, seed: 42}\n")
                  .ok());
  auto from_yaml = LoadJobSpecFile(yaml);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status().ToString();
  EXPECT_EQ(from_yaml->model().width(), 32);
  EXPECT_EQ(from_yaml->training().batch_size(), 48);
  EXPECT_EQ(from_yaml->optimizer().lr(), 1e-3);  // defaults applied
  const std::string json_path = dir.Sub("job.json");
  ASSERT_TRUE(train_testing::WriteSpecJson(json_path, *from_yaml).ok());
  auto from_json = LoadJobSpecFile(json_path);
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  EXPECT_EQ(from_json->SerializeAsString(), from_yaml->SerializeAsString());

  ASSERT_TRUE(
      WriteFileAtomically(
          yaml, "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  training: {batch_sze: 4}\n")
          .ok());
  auto bad = LoadJobSpecFile(yaml);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(yaml), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("batch_sze"), std::string::npos) << bad.status().ToString();
  v1::JobSpec invalid = *from_yaml;
  invalid.mutable_model()->set_heads(5);
  ASSERT_TRUE(train_testing::WriteSpecJson(json_path, invalid).ok());
  bad = LoadJobSpecFile(json_path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("heads"), std::string::npos) << bad.status().ToString();
}

TEST_F(TrainTest, InProcessTrainerExportsMetrics) {
  MetricsServer metrics;
  Status served = metrics.Serve("127.0.0.1:0");
  ASSERT_TRUE(served.ok()) << served.ToString();
  TrainerOptions o;
  o.spec = train_testing::TinySpec(288, 16, 2, 48, 1);
  o.labelstore_address = store_->address();
  o.label_set = "test/r0";
  o.metrics = &metrics;
  o.threads = 1;
  std::vector<json> events;
  o.on_event = [&](const json& e) { events.push_back(e); };
  SetBlasThreads(2);
  auto trainer = Trainer::Create(o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  // The worker's thread count reaches OpenBLAS's own pool too (0 = the BLAS is not OpenBLAS).
  if (BlasThreads() != 0) {
    EXPECT_EQ(BlasThreads(), 1);
  }
  ASSERT_TRUE((*trainer)->Run().ok());
  EXPECT_EQ((*trainer)->summary().steps_run, 6);
  EXPECT_TRUE((*trainer)->summary().last_checkpoint.empty());  // no checkpoint dir given
  const std::string page = HttpGet(metrics.port(), "/metrics");
  const std::string labels = "{job_id=\"standalone\",rank=\"0\",round=\"0\",variant=\"mlcd\"}";
  for (const std::string& series :
       {"mlcd_worker_loss" + labels, "mlcd_worker_samples_per_second" + labels,
        std::string("mlcd_worker_mean_positive_cosine{"),
        std::string("mlcd_worker_mean_negative_cosine{"), std::string("mlcd_worker_learning_rate{"),
        "mlcd_worker_label_wait_seconds_count" + labels + " 6",
        "mlcd_worker_backbone_seconds_count" + labels + " 6",
        std::string("mlcd_worker_classification_layer_seconds_count{"),
        std::string("mlcd_worker_collective_seconds_count{"),
        "mlcd_worker_steps_total" + labels + " 6", "mlcd_worker_samples_total" + labels + " 288"}) {
    EXPECT_NE(page.find(series), std::string::npos) << series << "\n" << page;
  }
  EXPECT_EQ(events.back()["event"], "finished");
}

// training.time_budget_minutes with a fake clock that moves 2.5 s per step: the step count
// that fits, a schedule that ends on the last step, a partial last epoch committed as the
// round's end, and a restart that keeps the count although its own steps would be slower.
TEST_F(TrainTest, TimeBudgetFixesTheRoundsStepsAndARestartKeepsThem) {
  // 288 images, batch 48: 6 steps per epoch; 4 epochs cap the round at 24 steps.
  v1::JobSpec spec = train_testing::TinySpec(288, 16, 2, 48, 4);
  spec.mutable_training()->set_time_budget_minutes(0.9);  // 54 s
  const std::string root = dir_->Sub("budget-ckpt");
  double now = 0;
  std::vector<json> events;
  TrainerOptions o;
  o.spec = spec;
  o.labelstore_address = store_->address();
  o.label_set = "test/r0";
  o.threads = 1;
  o.checkpoint_dir = root;
  o.keep_checkpoints = 0;
  o.clock = [&now] { return now; };
  o.on_event = [&](const json& e) {
    events.push_back(e);
    if (e["event"] == "progress") now += 2.5;
  };
  auto trainer = Trainer::Create(o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  ASSERT_TRUE((*trainer)->Run().ok());
  // Steps 3..10 are timed (2.5 s each, past 5 % of the budget); after step 10, 22.5 s are
  // spent of 54 * 0.95 = 51.3: 28.8 / 2.5 = 11 more steps, 21 in all (3 full epochs and one of
  // 3 steps).
  EXPECT_EQ((*trainer)->summary().steps_run, 21);
  EXPECT_EQ((*trainer)->summary().round_steps, 21);
  EXPECT_EQ((*trainer)->summary().global_step, 21);
  const auto budget = train_testing::EventsOf(events, "budget");
  ASSERT_EQ(budget.size(), 1u);
  EXPECT_EQ(budget[0]["round_steps"], 21);
  EXPECT_EQ(budget[0]["round_epochs"], 4);
  EXPECT_NEAR(budget[0]["steps_per_second"].get<double>(), 0.4, 1e-9);
  EXPECT_EQ(budget[0]["timed_steps"], 10);

  // From the decision on, the schedule is warm-up + cosine over exactly 21 steps: it ends on
  // the last step.
  v1::JobSpec defaults = spec;
  ApplyJobSpecDefaults(&defaults);
  LrScheduleOptions lr;
  lr.peak_lr = defaults.optimizer().lr();
  lr.warmup_fraction = defaults.optimizer().warmup_fraction();
  lr.total_steps = 21;
  const auto progress = train_testing::EventsOf(events, "progress");
  ASSERT_EQ(progress.size(), 21u);
  for (int64_t i = 10; i < 21; ++i) {
    EXPECT_DOUBLE_EQ(progress[i]["learning_rate"].get<double>(), LearningRateAt(lr, i)) << i;
  }
  EXPECT_GT(LearningRateAt(lr, 20), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(lr, 21), 0.0);  // the schedule is spent after the last step

  // The last epoch is partial and committed as the round's end.
  const auto checkpoints = train_testing::EventsOf(events, "checkpoint");
  ASSERT_EQ(checkpoints.size(), 4u);  // epoch ends at 6, 12, 18 and the round's end at 21
  EXPECT_EQ(checkpoints.back()["epoch"], 3);
  EXPECT_EQ(checkpoints.back()["step_in_epoch"], 3);
  EXPECT_EQ(checkpoints.back()["global_step"], 21);
  EXPECT_TRUE(checkpoints.back()["epoch_complete"].get<bool>());
  const std::string after_epoch_2 = checkpoints[1]["path"].get<std::string>();
  ASSERT_EQ(checkpoints[1]["global_step"], 12);

  // A restart from global step 12 with the recorded count: 9 more steps although its clock
  // says 100 s per step (a new measurement would stop at once), the same learning rates.
  std::vector<json> again;
  double slow = 0;
  TrainerOptions r = o;
  r.resume = after_epoch_2;
  r.round_steps = 21;
  r.clock = [&slow] { return slow; };
  r.on_event = [&](const json& e) {
    again.push_back(e);
    if (e["event"] == "progress") slow += 100;
  };
  auto restarted = Trainer::Create(r);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  ASSERT_TRUE((*restarted)->Run().ok());
  EXPECT_EQ((*restarted)->summary().steps_run, 9);
  EXPECT_EQ((*restarted)->summary().global_step, 21);
  EXPECT_TRUE(train_testing::EventsOf(again, "budget").empty());
  const auto resumed = train_testing::EventsOf(again, "progress");
  ASSERT_EQ(resumed.size(), 9u);
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_DOUBLE_EQ(resumed[i]["learning_rate"].get<double>(), LearningRateAt(lr, 12 + i)) << i;
  }
  const auto final_checkpoint = train_testing::EventsOf(again, "checkpoint").back();
  EXPECT_EQ(final_checkpoint["global_step"], 21);
  EXPECT_TRUE(final_checkpoint["epoch_complete"].get<bool>());

  // A count past the round's epochs is refused.
  TrainerOptions bad = o;
  bad.round_steps = 25;
  auto refused = Trainer::Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("epochs_per_round"), std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace mlcd::worker
