// Training on a given label set (clustering.label_set; coordinator/given_label_set.h) with the
// real services on loopback: a set imported with `mlcdctl labels import` trained on end to end
// by two worker agents, and the submit-time refusals with their codes and numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "coordinator/caller_checks.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/services_fixture.h"
#include "tests/coordinator/two_worker_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// The tiny job (384 images) on `set`, k and l left to the set.
TinyJob GivenSetJob(const std::string& set) {
  TinyJob spec;
  spec.k = 0;
  spec.l = 0;
  spec.clustering_fields = "label_set: " + set;
  return spec;
}

// `mlcdctl labels import` of an [n, 2] .npy: sample i has labels i % k and (i + 1) % k.
// The set is sealed and owned by whoever imports it.
void Import(const TestCluster& cluster, const TempDir& dir, const std::string& name, int n, int k) {
  std::vector<int64_t> labels;
  for (int i = 0; i < n; ++i) {
    labels.push_back(i % k);
    labels.push_back((i + 1) % k);
  }
  std::string file = name;
  for (char& c : file) c = c == '/' ? '_' : c;
  const std::string path = dir.Sub(file + ".npy");
  ASSERT_TRUE(WriteNpy(path, NpyDtype::kInt64, {n, 2}, labels.data()).ok());
  std::string out;
  ASSERT_EQ(
      RunCommand(BinPath("mlcdctl"),
                 {"labels", "import", "--name", name, "--k", std::to_string(k), "--npy", path},
                 &out, {"MLCD_LABELSTORE=" + cluster.labelstore_address()}, seconds(60)),
      0)
      << out;
}

// `status` has `code` and its message holds every one of `parts`.
void ExpectRefused(const Status& status, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  for (const auto& part : parts)
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "'" << part << "' not in: " << status.message();
}

class GivenLabelSetRefusalTest : public ServicesTest {};

TEST_F(GivenLabelSetRefusalTest, SubmitChecksTheSetAndFillsKAndL) {
  ASSERT_NO_FATAL_FAILURE(Import(*cluster_, dir_, "mine", 384, 12));
  ASSERT_NO_FATAL_FAILURE(Import(*cluster_, dir_, "short", 100, 12));
  // OPEN: created and written, never sealed.
  labelstore::LabelStoreClient store(cluster_->labelstore_address());
  ASSERT_TRUE(store.CreateLabelSet({"open", 12, 2, false, {}}).ok());
  std::vector<uint64_t> ids(384);
  std::vector<int32_t> rows(2 * ids.size(), 3);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  ASSERT_TRUE(store.WriteLabels("open", ids.data(), ids.size(), 2, rows.data()).ok());

  // k and l left out: the set's, as stored with the job.
  auto job = cluster_->Submit(GivenSetJob("mine").Yaml());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec().clustering().k(), 12);
  EXPECT_EQ(job->spec().clustering().l(), 2);
  EXPECT_EQ(job->spec().clustering().label_set(), "mine");
  // The same numbers given are fine too.
  TinyJob same = GivenSetJob("mine");
  same.k = 12;
  same.l = 2;
  EXPECT_TRUE(cluster_->Submit(same.Yaml()).ok());

  ExpectRefused(cluster_->Submit(GivenSetJob("nowhere").Yaml()).status(), StatusCode::kNotFound,
                {"spec.clustering.label_set", "'nowhere' does not exist", "labels import"});
  ExpectRefused(cluster_->Submit(GivenSetJob("open").Yaml()).status(),
                StatusCode::kFailedPrecondition, {"'open' is not sealed", "labels seal open"});
  ExpectRefused(cluster_->Submit(GivenSetJob("short").Yaml()).status(),
                StatusCode::kFailedPrecondition, {"100 samples", "384"});
  TinyJob rounds = GivenSetJob("mine");
  rounds.rounds = 2;
  ExpectRefused(cluster_->Submit(rounds.Yaml()).status(), StatusCode::kInvalidArgument,
                {"spec.training.rounds",
                 "rounds > 1 needs clustering; a given label set "
                 "trains one round"});
  TinyJob k = GivenSetJob("mine");
  k.k = 16;
  ExpectRefused(cluster_->Submit(k.Yaml()).status(), StatusCode::kInvalidArgument,
                {"spec.clustering.k: 16", "has 12 classes"});
  TinyJob l = GivenSetJob("mine");
  l.l = 3;
  ExpectRefused(cluster_->Submit(l.Yaml()).status(), StatusCode::kInvalidArgument,
                {"spec.clustering.l: 3", "has 2 labels per sample"});
  // A world size the set's k cannot shard.
  ASSERT_NO_FATAL_FAILURE(Import(*cluster_, dir_, "one-class", 384, 1));
  ExpectRefused(cluster_->Submit(GivenSetJob("one-class").Yaml()).status(),
                StatusCode::kInvalidArgument, {"world_size: 2 > clustering.k: 1"});
}

// Who may train on a set: its owner, the submitter of the job that owns it, an admin; with no
// callers checked, anyone.
TEST(GivenLabelSetOwnerTest, OnlyTheOwnerItsJobsSubmitterOrAnAdmin) {
  using coordinator::CheckGivenLabelSetOwner;
  const std::string alice = "token:alice", bob = "token:bob";
  EXPECT_TRUE(CheckGivenLabelSetOwner("s", alice, alice, false, nullptr).ok());
  EXPECT_TRUE(CheckGivenLabelSetOwner("s", alice, bob, true, nullptr).ok());
  EXPECT_TRUE(CheckGivenLabelSetOwner("s", alice, "", false, nullptr).ok());
  EXPECT_TRUE(CheckGivenLabelSetOwner("job/j-1/r0", "job:j-1", bob, false, &bob).ok());
  ExpectRefused(CheckGivenLabelSetOwner("s", alice, bob, false, nullptr),
                StatusCode::kPermissionDenied,
                {"'s' is owned by 'token:alice'", "'token:bob'", "labels import"});
  ExpectRefused(CheckGivenLabelSetOwner("job/j-1/r0", "job:j-1", bob, false, &alice),
                StatusCode::kPermissionDenied, {"'job:j-1'"});
  ExpectRefused(CheckGivenLabelSetOwner("old", "", bob, false, nullptr),
                StatusCode::kPermissionDenied, {"no one recorded"});
}

class GivenLabelSetEndToEndTest : public TwoWorkerClusterTest {};

// PENDING -> TRAINING -> SUCCEEDED on the imported set: no clustering, no assignment, and the
// training gang's assignments name the set, which the job leaves as it was.
TEST_F(GivenLabelSetEndToEndTest, TrainsOnAnImportedSetWithoutClustering) {
  ASSERT_NO_FATAL_FAILURE(Import(*cluster_, dir_, "team/tags", 384, 8));
  TinyJob spec = GivenSetJob("team/tags");
  auto submitted = cluster_->Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = cluster_->WaitForJob(
      submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(240));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message() << "\n" << cluster_->Logs();

  job = cluster_->Get(submitted->id(), /*history=*/true);
  ASSERT_TRUE(job.ok());
  std::vector<std::string> states;
  for (const auto& h : job->history())
    if (h.kind() == "state") states.push_back(h.message());
  ASSERT_EQ(states.size(), 2u);
  EXPECT_NE(states[0].find("training on the given label set team/tags (k 8, l 2)"),
            std::string::npos)
      << states[0];
  EXPECT_EQ(job->phase_seconds().count("CLUSTERING"), 0u);
  EXPECT_EQ(job->phase_seconds().count("ASSIGNING"), 0u);
  EXPECT_EQ(job->spec().clustering().k(), 8);
  ASSERT_EQ(job->rounds_size(), 1);
  EXPECT_EQ(job->rounds(0).label_set(), "team/tags");
  EXPECT_EQ(job->label_set(), "team/tags");
  EXPECT_FALSE(job->rounds(0).clustered());
  EXPECT_TRUE(job->rounds(0).trained());
  EXPECT_EQ(job->progress().total_steps(), spec.TotalSteps());

  // Every TRAIN assignment the agents ran named the given set.
  int assignments = 0;
  for (int w = 0; w < 2; ++w) {
    const std::string root = cluster_->WorkerDataDir(w) + "/assignments";
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      auto text = ReadFileToString(entry.path().string() + "/assignment.json");
      ASSERT_TRUE(text.ok());
      EXPECT_NE(text->find("team/tags"), std::string::npos) << *text;
      ++assignments;
    }
  }
  EXPECT_EQ(assignments, 2);

  // The set is untouched: still there, sealed, with its rows.
  labelstore::LabelStoreClient store(cluster_->labelstore_address());
  auto info = store.Describe("team/tags");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_SEALED);
  EXPECT_EQ(info->num_samples(), 384u);
  auto sets = store.List("job/");
  ASSERT_TRUE(sets.ok());
  EXPECT_TRUE(sets->empty()) << "the job made a label set of its own";
}

}  // namespace
}  // namespace mlcd::testing
