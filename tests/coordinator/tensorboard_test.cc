// TensorBoard event files of a real job (docs/metrics.md, "TensorBoard"): a tiny job
// on the real services and two worker agents, then its folder (Job.tensorboard_dir, also
// printed by `mlcdctl logs JOB --tensorboard`) read back with our reader
// (common/event_file.h) and, when MLCD_INTEROP_PYTHON is set (the interop stage,
// scripts/run_interop_tests.sh), with TensorBoard's own EventAccumulator
// (tensorboard_check.py), checking every run, tag, step and value against the job record and
// rank 0's progress events. Then the last record of the training file is cut short, as by a
// worker killed mid-write: both readers keep every whole record and drop only the cut one.
#include <dirent.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/event_file.h"
#include "common/file_util.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;
// run -> tag -> [(step, value)]
using Curves = std::map<std::string, std::map<std::string, std::vector<std::pair<int64_t, float>>>>;

constexpr int kEverySteps = 4;

std::vector<std::string> EventFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("events.out.tfevents.", 0) == 0) out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Every run's scalars as our reader sees them (files in name order, as TensorBoard reads them).
Curves ReadCurves(const std::string& logdir, const std::vector<std::string>& runs) {
  Curves out;
  for (const auto& run : runs) {
    for (const auto& file : EventFilesIn(logdir + "/" + run)) {
      auto read = ReadEventFile(file);
      EXPECT_TRUE(read.ok()) << read.status().ToString();
      if (!read.ok()) continue;
      EXPECT_FALSE(read->events.empty());
      if (!read->events.empty()) {
        EXPECT_EQ(read->events[0].file_version(), kEventFileVersion);
      }
      for (const auto& e : read->events) {
        for (const auto& v : e.summary().value())
          out[run][v.tag()].push_back({e.step(), v.simple_value()});
      }
    }
  }
  return out;
}

// What rank 0 of the training gang must have written: its progress events every kEverySteps
// optimizer steps and its last one.
std::map<std::string, std::vector<std::pair<int64_t, float>>> ExpectedTraining(
    const std::vector<nlohmann::json>& progress, double centre_lr_multiplier) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (size_t i = 0; i < progress.size(); ++i) {
    const auto& p = progress[i];
    const int64_t step = p["global_step"].get<int64_t>();
    if (step % kEverySteps != 0 && i + 1 != progress.size()) continue;
    const float lr = p["learning_rate"].get<float>();
    out["train/loss"].push_back({step, p["loss"].get<float>()});
    out["train/learning_rate"].push_back({step, lr});
    out["train/centre_learning_rate"].push_back(
        {step, lr * static_cast<float>(centre_lr_multiplier)});
    out["train/step_seconds"].push_back({step, p["step_seconds"].get<float>()});
    out["train/images_per_second"].push_back({step, p["samples_per_second"].get<float>()});
  }
  return out;
}

std::map<std::string, std::vector<std::pair<int64_t, float>>> ExpectedCoordinator(
    const v1::Job& job, int64_t last_step) {
  const auto& c = job.rounds(0).cluster();
  const auto& a = job.rounds(0).assign();
  auto f = [](double v) { return static_cast<float>(v); };
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out = {
      {"clustering/objective", {{0, f(c.final_objective())}}},
      {"clustering/iterations", {{0, f(c.iterations())}}},
      {"clustering/seconds", {{0, f(c.seconds())}}},
      {"clustering/empty_clusters", {{0, f(static_cast<double>(c.sizes().empty_clusters()))}}},
      {"clustering/imbalance_factor", {{0, f(c.sizes().imbalance_factor())}}},
      {"labels/approx_recall", {{0, f(a.approx_recall())}}},
      {"labels/seconds", {{0, f(a.seconds())}}},
      {"labels/top1_recall", {{0, f(a.quality().top1_recall())}}},
      {"labels/topl_recall", {{0, f(a.quality().topl_recall())}}},
      {"labels/nmi", {{0, f(a.quality().nmi())}}},
      {"labels/clusters_used", {{0, f(static_cast<double>(a.quality().clusters_used()))}}},
      {"eval/linear_probe_accuracy/model",
       {{last_step, f(job.evaluation().linear_probe_accuracy())}}},
      {"eval/knn_accuracy/model", {{last_step, f(job.evaluation().knn_accuracy())}}},
  };
  for (const auto& b : job.evaluation().baselines()) {
    out["eval/linear_probe_accuracy/" + b.name()] = {{last_step, f(b.linear_probe_accuracy())}};
    out["eval/knn_accuracy/" + b.name()] = {{last_step, f(b.knn_accuracy())}};
  }
  return out;
}

// TensorBoard's EventAccumulator on `logdir` against `want` (only in the interop stage).
void CheckWithTensorBoard(const std::string& logdir, const Curves& want, const TempDir& tmp) {
  const char* python = std::getenv("MLCD_INTEROP_PYTHON");
  if (!python || !*python) {
    std::cout << "MLCD_INTEROP_PYTHON not set: TensorBoard's reader runs in the interop stage\n";
    return;
  }
  nlohmann::json expect = nlohmann::json::object();
  for (const auto& [run, tags] : want) {
    for (const auto& [tag, points] : tags) {
      for (const auto& [step, value] : points)
        expect[run][tag].push_back({step, static_cast<double>(value)});
    }
  }
  const std::string expect_path = tmp.Sub("expect.json");
  std::ofstream(expect_path) << expect.dump();
  std::string out;
  EXPECT_EQ(RunCommand(python,
                       {std::string(MLCD_SOURCE_DIR) + "/tests/coordinator/tensorboard_check.py",
                        "--logdir", logdir, "--expect", expect_path},
                       &out),
            0)
      << out;
  std::cout << out;
}

class TensorboardJobTest : public TwoWorkerClusterTest {};

TEST_F(TensorboardJobTest, EveryRunTagAndStepIsReadBackAndACutLastRecordIsTolerated) {
  TinyJob spec;
  spec.evaluation = true;
  spec.eval_train_limit = 300;
  spec.eval_test_limit = 200;
  std::string yaml = spec.Yaml();
  const std::string training = "  training:\n";
  yaml.insert(yaml.find(training) + training.size(),
              "    tensorboard_every_steps: " + std::to_string(kEverySteps) + "\n");
  auto submitted = cluster_->Submit(yaml);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = cluster_->WaitForState(submitted->id(), v1::JOB_STATE_SUCCEEDED, seconds(240));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  ASSERT_EQ(job->restarts(), 0);
  const std::string logdir =
      cluster_->coordinator_data_dir() + "/jobs/" + job->id() + "/tensorboard";
  EXPECT_EQ(job->tensorboard_dir(), logdir);

  // mlcdctl logs JOB --tensorboard prints it; without a kind of log it says which there are.
  const std::string flag = "--coordinator=" + cluster_->coordinator_address();
  std::string out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "logs", job->id(), "--tensorboard"}, &out), 0);
  EXPECT_EQ(out, logdir + "\n");
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "-o", "json", "logs", job->id(), "--tensorboard"},
                       &out),
            0);
  EXPECT_EQ(nlohmann::json::parse(out)["tensorboard_dir"], logdir) << out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "logs", job->id()}, &out), 2) << out;
  EXPECT_NE(out.find("--tensorboard"), std::string::npos) << out;

  // Rank 0's progress events of the (only) training gang.
  std::vector<nlohmann::json> progress;
  for (int w = 0; w < 2; ++w) {
    for (const auto& [assignment, events] : ProgressEvents(cluster_->WorkerDataDir(w))) {
      if (assignment.size() < 3 || assignment.substr(assignment.size() - 3) != "-r0") continue;
      for (const auto& e : events) {
        if (e.value("event", "") == "progress" && e.contains("global_step")) progress.push_back(e);
      }
    }
  }
  ASSERT_EQ(progress.size(), static_cast<size_t>(spec.TotalSteps()));
  const int64_t last_step = progress.back()["global_step"].get<int64_t>();
  ASSERT_EQ(last_step, spec.TotalSteps());
  ASSERT_NE(last_step % kEverySteps, 0) << "the test wants a last step off the sampling grid";

  Curves want;
  want["train"] = ExpectedTraining(progress, job->spec().optimizer().centre_lr_multiplier());
  want["coordinator"] = ExpectedCoordinator(*job, last_step);
  ASSERT_EQ(want["train"]["train/loss"].size(), static_cast<size_t>(last_step / kEverySteps + 1));
  ASSERT_EQ(EventFilesIn(logdir + "/train").size(), 1u);
  ASSERT_EQ(EventFilesIn(logdir + "/coordinator").size(), 2u);  // round 0, evaluation
  EXPECT_EQ(ReadCurves(logdir, {"train", "coordinator"}), want);
  CheckWithTensorBoard(logdir, want, dir_);

  // The training file's last record cut short (a worker killed mid-write).
  const std::string train_file = EventFilesIn(logdir + "/train")[0];
  auto whole = ReadFileToString(train_file);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(WriteFileAtomically(train_file, whole->substr(0, whole->size() - 7)).ok());
  auto cut = ReadEventFile(train_file);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_GT(cut->truncated_tail_bytes, 0u);
  for (auto& [tag, points] : want["train"]) points.pop_back();
  EXPECT_EQ(ReadCurves(logdir, {"train", "coordinator"}), want);
  CheckWithTensorBoard(logdir, want, dir_);
}

}  // namespace
}  // namespace mlcd::testing
