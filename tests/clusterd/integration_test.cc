// The real mlcd-clusterd and mlcd-labelstore binaries on loopback: cluster, assign, read the
// sealed label set back through the label store and compare it with brute force; bad input
// through the service; mlcdctl cluster/assign; queueing; cancellation; /metrics.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "common/file_util.h"
#include "common/net.h"
#include "common/npy.h"
#include "tests/clusterd/request_helpers.h"
#include "tests/testing/http.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

using Clock = std::chrono::steady_clock;

// GET /metrics over a plain socket.
std::string HttpGetMetrics(int port) { return mlcd::testing::HttpGet(port, "/metrics"); }

class ClusterdIntegration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::vector<std::string> env = {"MLCD_NO_BLAS_TUNING=1", "OMP_NUM_THREADS=2"};
    labelstore_addr_ = "127.0.0.1:" + std::to_string(PickFreePort());
    labelstore_ = new testing::ChildProcess();
    ASSERT_TRUE(labelstore_
                    ->Start(testing::BinPath("mlcd-labelstore"),
                            {"--listen", labelstore_addr_, "--metrics-listen", "", "--data-dir",
                             dir_->Sub("ls")},
                            dir_->Sub("labelstore.log"), env)
                    .ok());
    clusterd_addr_ = "127.0.0.1:" + std::to_string(PickFreePort());
    metrics_port_ = PickFreePort();
    clusterd_ = new testing::ChildProcess();
    ASSERT_TRUE(clusterd_
                    ->Start(testing::BinPath("mlcd-clusterd"),
                            {"--listen", clusterd_addr_, "--metrics-listen",
                             "127.0.0.1:" + std::to_string(metrics_port_), "--data-dir",
                             dir_->Sub("cd"), "--labelstore", labelstore_addr_, "--data-root",
                             dir_->path(), "--data-root", "/usr/share/datasets"},
                            dir_->Sub("clusterd.log"), env)
                    .ok());
    ASSERT_TRUE(testing::WaitForServing(labelstore_addr_, std::chrono::seconds(30)).ok())
        << labelstore_->Log();
    ASSERT_TRUE(testing::WaitForServing(clusterd_addr_, std::chrono::seconds(30)).ok())
        << clusterd_->Log();

    // Features: a mixture written by the real CLI (2 shards, float16) plus its components.
    std::string out;
    int rc = testing::RunCommand(
        testing::BinPath("mlcd-clusterd"),
        {"features", "--kind", "synthetic", "--rows", "4000", "--dim", "16", "--centres", "12",
         "--noise", "0.4", "--shards", "2", "--dtype", "float16", "--out", dir_->Sub("feats"),
         "--labels-out", dir_->Sub("comp.labels.npy")},
        &out, env);
    ASSERT_EQ(rc, 0) << out;
  }

  static void TearDownTestSuite() {
    if (clusterd_) clusterd_->Stop();
    if (labelstore_) labelstore_->Stop();
    delete clusterd_;
    delete labelstore_;
    delete dir_;
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- clusterd log ----\n"
                << clusterd_->Log() << "\n---- labelstore log ----\n"
                << labelstore_->Log() << "\n";
    }
  }

  static v1::AssignRequest AssignRequest(const std::string& features, const std::string& centroids,
                                         int l, const std::string& name) {
    v1::AssignRequest r;
    r.mutable_features()->add_paths(features);
    r.set_centroids_path(centroids);
    r.set_l(l);
    r.set_label_set(name);
    return r;
  }

  // 60000 x 32 rows (100 mixture components): k-means with k = 500 and thousands of
  // iterations runs for minutes, long enough to cancel.
  static Status WriteLongJobFeatures(const std::string& out_dir) {
    SyntheticMixtureOptions o;
    o.rows = 60000;
    o.dim = 32;
    o.num_centres = 100;
    o.out_dir = out_dir;
    return WriteSyntheticMixture(o).status();
  }

  static testing::TempDir* dir_;
  static testing::ChildProcess* labelstore_;
  static testing::ChildProcess* clusterd_;
  static std::string labelstore_addr_, clusterd_addr_;
  static int metrics_port_;
};

testing::TempDir* ClusterdIntegration::dir_ = nullptr;
testing::ChildProcess* ClusterdIntegration::labelstore_ = nullptr;
testing::ChildProcess* ClusterdIntegration::clusterd_ = nullptr;
std::string ClusterdIntegration::labelstore_addr_;
std::string ClusterdIntegration::clusterd_addr_;
int ClusterdIntegration::metrics_port_ = 0;

TEST_F(ClusterdIntegration, ClusterAssignAndReadBackTheSealedLabelSet) {
  ClusterdClient client(clusterd_addr_);
  int iterations = 0, notes = 0;
  auto cluster =
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 12, 10, dir_->Sub("c12.npy")),
                     [&](const v1::ClusterProgress& p) {
                       iterations += p.has_iteration();
                       notes += p.has_note();
                     });
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_EQ(iterations, 10);
  EXPECT_GT(notes, 0);
  EXPECT_EQ(cluster->k(), 12);
  EXPECT_EQ(cluster->d(), 16);
  EXPECT_EQ(cluster->num_points(), 4000u);
  EXPECT_EQ(cluster->sizes().empty_clusters(), 0u);
  EXPECT_NEAR(cluster->sizes().mean(), 4000.0 / 12, 1e-9);
  std::vector<int64_t> shape;
  auto centroids = ReadNpyAsFloat32(dir_->Sub("c12.npy"), &shape);
  ASSERT_TRUE(centroids.ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{12, 16}));

  v1::AssignRequest req = AssignRequest(dir_->Sub("feats"), dir_->Sub("c12.npy"), 3, "it/basic/r0");
  req.set_class_labels_path(dir_->Sub("comp.labels.npy"));
  (*req.mutable_metadata())["job"] = "it";
  int64_t last_done = 0;
  auto assigned = client.Assign(req, [&](const v1::AssignProgress& p) {
    if (p.has_status()) last_done = static_cast<int64_t>(p.status().rows_done());
  });
  ASSERT_TRUE(assigned.ok()) << assigned.status().ToString();
  EXPECT_EQ(last_done, 4000);
  EXPECT_EQ(assigned->num_samples(), 4000u);
  EXPECT_EQ(assigned->label_set_samples(), 4000u);
  EXPECT_EQ(assigned->k(), 12);
  ASSERT_TRUE(assigned->has_quality());
  EXPECT_EQ(assigned->quality().num_classes(), 12u);
  EXPECT_GE(assigned->quality().topl_recall(), assigned->quality().top1_recall());
  EXPECT_GT(assigned->quality().nmi(), 0.5);

  // Read it back through the label store and compare with brute force over the shards.
  labelstore::LabelStoreClient store(labelstore_addr_);
  auto info = store.Describe("it/basic/r0");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_SEALED);
  EXPECT_EQ(info->num_samples(), 4000u);
  EXPECT_EQ(info->num_classes(), 12);
  EXPECT_EQ(info->labels_per_sample(), 3);
  EXPECT_TRUE(info->with_scores());
  EXPECT_EQ(info->metadata().at("job"), "it");
  EXPECT_EQ(info->metadata().at("centroids"), dir_->Sub("c12.npy"));

  std::vector<uint64_t> ids(4000);
  for (uint64_t i = 0; i < 4000; ++i) ids[i] = i;
  labelstore::LabelBatch batch;
  ASSERT_TRUE(store.GetLabels("it/basic/r0", ids.data(), ids.size(), true, &batch).ok());
  ASSERT_EQ(batch.num_rows(), 4000u);
  EXPECT_TRUE(batch.missing_ids.empty());
  auto shards = FeatureShards::Open({dir_->Sub("feats")});
  ASSERT_TRUE(shards.ok());
  std::vector<float> x(4000 * 16);
  shards->ReadRows(0, 4000, x.data());
  int64_t ties = 0;
  std::vector<int64_t> top1_counts(12, 0);
  for (int i = 0; i < 4000; ++i) {
    std::vector<std::pair<double, int>> s;
    for (int c = 0; c < 12; ++c) {
      double dot = 0;
      for (int j = 0; j < 16; ++j)
        dot += static_cast<double>(x[i * 16 + j]) * (*centroids)[c * 16 + j];
      s.push_back({-dot, c});
    }
    std::sort(s.begin(), s.end());
    ++top1_counts[s[0].second];
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(batch.scores[i * 3 + j], -s[j].first, 1e-4);
      if (batch.labels[i * 3 + j] != s[j].second) {
        ++ties;
        EXPECT_NEAR(s[j].first, s[j + 1 < 12 ? j + 1 : j].first, 1e-4) << "row " << i;
      }
    }
  }
  EXPECT_LE(ties, 4);

  // Cluster's size pass and Assign's top-1 labels count the same nearest centroids, and both
  // agree with the brute-force counts (up to the near-ties above).
  EXPECT_EQ(assigned->sizes().min(), cluster->sizes().min());
  EXPECT_EQ(assigned->sizes().max(), cluster->sizes().max());
  EXPECT_DOUBLE_EQ(assigned->sizes().stddev(), cluster->sizes().stddev());
  EXPECT_DOUBLE_EQ(assigned->sizes().imbalance_factor(), cluster->sizes().imbalance_factor());
  EXPECT_NEAR(static_cast<double>(*std::min_element(top1_counts.begin(), top1_counts.end())),
              static_cast<double>(cluster->sizes().min()), static_cast<double>(ties));
  EXPECT_NEAR(static_cast<double>(*std::max_element(top1_counts.begin(), top1_counts.end())),
              static_cast<double>(cluster->sizes().max()), static_cast<double>(ties));
}

// skip_size_pass (what the coordinator sends, since ASSIGNING follows): the same centroids,
// no size summary and no time spent on it.
TEST_F(ClusterdIntegration, SkipSizePassWritesTheSameCentroidsWithoutSizes) {
  ClusterdClient client(clusterd_addr_);
  auto with_pass =
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 12, 10, dir_->Sub("skip-a.npy")));
  ASSERT_TRUE(with_pass.ok()) << with_pass.status().ToString();
  v1::ClusterRequest req = MakeClusterRequest(dir_->Sub("feats"), 12, 10, dir_->Sub("skip-b.npy"));
  req.set_skip_size_pass(true);
  std::vector<std::string> notes;
  auto skipped = client.Cluster(req, [&](const v1::ClusterProgress& p) {
    if (p.has_note()) notes.push_back(p.note());
  });
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_TRUE(with_pass->has_sizes());
  EXPECT_GT(with_pass->sizes_seconds(), 0);
  EXPECT_FALSE(skipped->has_sizes());
  EXPECT_EQ(skipped->sizes_seconds(), 0);
  EXPECT_EQ(skipped->num_points(), 4000u);
  EXPECT_DOUBLE_EQ(skipped->final_objective(), with_pass->final_objective());
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("size pass skipped") != std::string::npos;
  }));
  std::vector<int64_t> shape_a, shape_b;
  auto a = ReadNpyAsFloat32(dir_->Sub("skip-a.npy"), &shape_a);
  auto b = ReadNpyAsFloat32(dir_->Sub("skip-b.npy"), &shape_b);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(shape_a, shape_b);
  EXPECT_EQ(*a, *b);
}

TEST_F(ClusterdIntegration, ExistingLabelSetNeedsReplaceExisting) {
  ClusterdClient client(clusterd_addr_);
  ASSERT_TRUE(
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 6, 3, dir_->Sub("c6.npy"))).ok());
  ASSERT_TRUE(
      client.Assign(AssignRequest(dir_->Sub("feats"), dir_->Sub("c6.npy"), 2, "it/replace/r0"))
          .ok());
  auto again =
      client.Assign(AssignRequest(dir_->Sub("feats"), dir_->Sub("c6.npy"), 1, "it/replace/r0"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("replace_existing"), std::string::npos);
  v1::AssignRequest replace =
      AssignRequest(dir_->Sub("feats"), dir_->Sub("c6.npy"), 1, "it/replace/r0");
  replace.set_replace_existing(true);
  ASSERT_TRUE(client.Assign(replace).ok());
  labelstore::LabelStoreClient store(labelstore_addr_);
  auto info = store.Describe("it/replace/r0");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->labels_per_sample(), 1);
  EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_SEALED);
}

TEST_F(ClusterdIntegration, BadInputIsRejectedWithItsMessage) {
  ClusterdClient client(clusterd_addr_);
  // NaN rows.
  std::vector<float> v(50 * 4, 0.5f);
  v[7 * 4 + 2] = std::nanf("");
  ASSERT_TRUE(WriteNpy(dir_->Sub("nan.npy"), NpyDtype::kFloat32, {50, 4}, v.data()).ok());
  auto nan = client.Cluster(MakeClusterRequest(dir_->Sub("nan.npy"), 2, 2, dir_->Sub("bad.npy")));
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find(dir_->Sub("nan.npy") +
                                        ": 1 of 50 rows contain NaN or Inf values (row 7)"),
            std::string::npos)
      << nan.status().message();
  // Missing file.
  auto missing =
      client.Cluster(MakeClusterRequest(dir_->Sub("nope.npy"), 2, 2, dir_->Sub("bad.npy")));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // Truncated file.
  auto bytes = ReadFileToString(dir_->Sub("nan.npy"));
  ASSERT_TRUE(
      WriteFileAtomically(dir_->Sub("trunc.npy"), bytes->substr(0, bytes->size() - 9)).ok());
  auto trunc =
      client.Cluster(MakeClusterRequest(dir_->Sub("trunc.npy"), 2, 2, dir_->Sub("bad.npy")));
  EXPECT_EQ(trunc.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(trunc.status().message().find("trunc.npy"), std::string::npos);
  // k > n, and l > k.
  auto big_k =
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 4001, 2, dir_->Sub("bad.npy")));
  EXPECT_EQ(big_k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big_k.status().message().find("larger than the number of feature rows (4000)"),
            std::string::npos);
  ASSERT_TRUE(
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 4, 2, dir_->Sub("c4.npy"))).ok());
  auto big_l = client.Assign(AssignRequest(dir_->Sub("feats"), dir_->Sub("c4.npy"), 5, "it/bad/l"));
  EXPECT_EQ(big_l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big_l.status().message().find("l = 5 is larger than the number of centroids k = 4"),
            std::string::npos);
  // Missing request fields.
  auto no_out = client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 4, 2, ""));
  EXPECT_EQ(no_out.status().code(), StatusCode::kInvalidArgument);
  auto bad_name =
      client.Assign(AssignRequest(dir_->Sub("feats"), dir_->Sub("c4.npy"), 2, "bad name!"));
  EXPECT_EQ(bad_name.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(PathExists(dir_->Sub("bad.npy")));
  // A class id of 1e12 is rejected before any work (it used to size per-class counters after
  // the set was sealed, so the call failed with UNKNOWN and a retry met ALREADY_EXISTS).
  auto classes = ReadNpyAsInt64(dir_->Sub("comp.labels.npy"));
  ASSERT_TRUE(classes.ok());
  (*classes)[17] = 1000000000000;
  ASSERT_TRUE(
      WriteNpy(dir_->Sub("huge.labels.npy"), NpyDtype::kInt64, {4000}, classes->data()).ok());
  v1::AssignRequest huge =
      AssignRequest(dir_->Sub("feats"), dir_->Sub("c4.npy"), 2, "it/bad/classes");
  huge.set_class_labels_path(dir_->Sub("huge.labels.npy"));
  auto huge_class = client.Assign(huge);
  EXPECT_EQ(huge_class.status().code(), StatusCode::kInvalidArgument)
      << huge_class.status().ToString();
  EXPECT_NE(
      huge_class.status().message().find(dir_->Sub("huge.labels.npy") +
                                         ": class label 1000000000000 at row 17 is too large"),
      std::string::npos)
      << huge_class.status().message();
  // No failed Assign left a label set behind.
  labelstore::LabelStoreClient store(labelstore_addr_);
  auto sets = store.List("it/bad/");
  ASSERT_TRUE(sets.ok());
  EXPECT_TRUE(sets->empty());
  // So the same name works once the input is fixed.
  huge.set_class_labels_path(dir_->Sub("comp.labels.npy"));
  auto fixed = client.Assign(huge);
  ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
  EXPECT_TRUE(fixed->has_quality());
}

TEST_F(ClusterdIntegration, MlcdctlClusterAndAssign) {
  const std::vector<std::string> env = {"MLCD_CLUSTERD=" + clusterd_addr_};
  std::string out;
  int rc = testing::RunCommand(testing::BinPath("mlcdctl"),
                               {"--output", "json", "cluster", "--features", dir_->Sub("feats"),
                                "--k", "8", "--niter", "4", "--out", dir_->Sub("ctl.npy")},
                               &out, env);
  ASSERT_EQ(rc, 0) << out;
  auto json = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(json["k"], 8);
  EXPECT_EQ(json["centroids_path"], dir_->Sub("ctl.npy"));
  EXPECT_EQ(json["iterations"], 4);

  rc = testing::RunCommand(
      testing::BinPath("mlcdctl"),
      {"assign", "--features", dir_->Sub("feats"), "--centroids", dir_->Sub("ctl.npy"), "--l", "2",
       "--label-set", "it/ctl/r0", "--class-labels", dir_->Sub("comp.labels.npy")},
      &out, env);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("label set: it/ctl/r0 (sealed, 4000 samples, k = 8, l = 2)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("label quality (paper A.8)"), std::string::npos) << out;

  // Bad input: exit code 2 (INVALID_ARGUMENT) and the reason on stderr.
  rc = testing::RunCommand(
      testing::BinPath("mlcdctl"),
      {"cluster", "--features", dir_->Sub("feats"), "--k", "5000", "--out", dir_->Sub("x.npy")},
      &out, env);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("k = 5000 is larger than the number of feature rows (4000)"),
            std::string::npos)
      << out;
}

// Before: Assign dialled whatever labelstore address the caller named and, with
// replace_existing, deleted a set of that name there (SSRF). Now the daemon writes only to its
// own --labelstore; naming another is PERMISSION_DENIED and nothing reaches it.
TEST_F(ClusterdIntegration, AssignNeverDialsACallerChosenLabelstore) {
  testing::ChildProcess other;
  const std::string other_addr = "127.0.0.1:" + std::to_string(PickFreePort());
  ASSERT_TRUE(
      other
          .Start(testing::BinPath("mlcd-labelstore"),
                 {"--listen", other_addr, "--metrics-listen", "", "--data-dir", dir_->Sub("ls2")},
                 dir_->Sub("labelstore2.log"))
          .ok());
  ASSERT_TRUE(testing::WaitForServing(other_addr, std::chrono::seconds(30)).ok()) << other.Log();
  ClusterdClient client(clusterd_addr_);
  ASSERT_TRUE(
      client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 5, 2, dir_->Sub("c5.npy"))).ok());
  v1::AssignRequest req = AssignRequest(dir_->Sub("feats"), dir_->Sub("c5.npy"), 2, "it/ssrf");
  req.set_labelstore(other_addr);
  req.set_replace_existing(true);
  auto refused = client.Assign(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("writes only to the label store it was started with"),
            std::string::npos)
      << refused.status().message();
  labelstore::LabelStoreClient own(labelstore_addr_), second(other_addr);
  EXPECT_EQ(second.Describe("it/ssrf").status().code(), StatusCode::kNotFound);
  // Its own address, or none, is fine.
  req.set_labelstore(labelstore_addr_);
  ASSERT_TRUE(client.Assign(req).ok());
  EXPECT_TRUE(own.Describe("it/ssrf").ok());

  // mlcdctl's global --labelstore names the store; the daemon refuses another one.
  auto assign = [&](const std::string& name, std::vector<std::string> global, int want_rc) {
    std::vector<std::string> args = global;
    for (const char* a : {"assign", "--features"}) args.push_back(a);
    args.insert(args.end(), {dir_->Sub("feats"), "--centroids", dir_->Sub("c5.npy"), "--l", "2",
                             "--label-set", name});
    std::string out;
    int rc = testing::RunCommand(testing::BinPath("mlcdctl"), args, &out,
                                 {"MLCD_CLUSTERD=" + clusterd_addr_, "MLCD_LABELSTORE="});
    EXPECT_EQ(rc, want_rc) << out;
    return out;
  };
  const std::string out =
      assign("it/global/flag", {"--labelstore", other_addr}, 8);  // 8: PERMISSION_DENIED
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  assign("it/global/default", {}, 0);
  EXPECT_EQ(second.Describe("it/global/flag").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(own.Describe("it/global/default").ok());
  other.Stop();
}

// Before: centroids_out could be absolute or hold "../" (an existing file was overwritten with
// centroids), features were read from anywhere, and the errors told whether a path existed.
// Now every path resolves under the data roots, and a path outside gets the same answer
// whether it exists or not.
TEST_F(ClusterdIntegration, PathsOutsideTheDataRootsAreRefusedAlike) {
  testing::TempDir outside;  // not under any --data-root of the daemon
  const std::string victim = outside.Sub("victim.npy");
  ASSERT_TRUE(WriteFileAtomically(victim, std::string("precious")).ok());
  ASSERT_EQ(symlink(outside.path().c_str(), dir_->Sub("escape").c_str()), 0);
  ClusterdClient client(clusterd_addr_);
  auto refusal = [&](const v1::ClusterRequest& r, const std::string& path) {
    return RefusalNamingPath(client.Cluster(r), path);
  };
  for (const std::string& out :
       {victim, dir_->Sub("cd/../../" + outside.path().substr(1) + "/victim.npy"),
        dir_->Sub("escape/victim.npy")}) {
    refusal(MakeClusterRequest(dir_->Sub("feats"), 3, 2, out), out);
  }
  EXPECT_EQ(*ReadFileToString(victim), "precious");
  // Relative paths resolve under --data-dir: "../../.." climbs out of the roots.
  refusal(MakeClusterRequest(dir_->Sub("feats"), 3, 2, "../../../../../../tmp/x.npy"),
          "centroids_out");
  // An existing and a missing feature file outside the roots: the same message.
  const std::string exists = refusal(MakeClusterRequest(victim, 3, 2, dir_->Sub("o.npy")), victim);
  const std::string missing =
      refusal(MakeClusterRequest(outside.Sub("none.npy"), 3, 2, dir_->Sub("o.npy")),
              outside.Sub("none.npy"));
  EXPECT_EQ(exists, missing);
  EXPECT_NE(exists.find("is not under a data root"), std::string::npos) << exists;
  auto assign = client.Assign(AssignRequest(dir_->Sub("feats"), victim, 2, "it/escape"));
  EXPECT_EQ(assign.status().code(), StatusCode::kPermissionDenied);
}

// Before: a folder of shards was listed and every *.npy in it read, so a symlink placed inside
// a root led clusterd to a file outside it. Now each listed link must resolve under the roots,
// and one leading outside and a dangling one get the same refusal.
TEST_F(ClusterdIntegration, SymlinksInAShardFolderMustStayUnderTheDataRoots) {
  testing::TempDir outside;  // not under any --data-root of the daemon
  auto shards = ExpandShardPaths({dir_->Sub("feats")});
  ASSERT_TRUE(shards.ok() && !shards->empty());
  auto shard = ReadFileToString(shards->front());
  ASSERT_TRUE(shard.ok());
  ASSERT_TRUE(WriteFileAtomically(outside.Sub("stolen.npy"), *shard).ok());
  ASSERT_TRUE(MakeDirs(dir_->Sub("linked")).ok());
  ASSERT_TRUE(MakeDirs(dir_->Sub("dangling")).ok());
  ASSERT_TRUE(MakeDirs(dir_->Sub("inside")).ok());
  const std::string linked = dir_->Sub("linked/a.npy"), dangling = dir_->Sub("dangling/a.npy");
  ASSERT_EQ(symlink(outside.Sub("stolen.npy").c_str(), linked.c_str()), 0);
  ASSERT_EQ(symlink(outside.Sub("none.npy").c_str(), dangling.c_str()), 0);
  ASSERT_EQ(symlink(shards->front().c_str(), dir_->Sub("inside/a.npy").c_str()), 0);
  ClusterdClient client(clusterd_addr_);
  auto refusal = [&](const std::string& folder, const std::string& path) {
    return RefusalNamingPath(
        client.Cluster(MakeClusterRequest(folder, 3, 2, dir_->Sub("linked.c.npy"))), path);
  };
  const std::string exists = refusal(dir_->Sub("linked"), linked);
  const std::string missing = refusal(dir_->Sub("dangling"), dangling);
  EXPECT_EQ(exists, missing);
  EXPECT_NE(exists.find("is not under a data root"), std::string::npos) << exists;
  EXPECT_EQ(exists.find(outside.path()), std::string::npos)
      << "names the link's target: " << exists;
  EXPECT_FALSE(PathExists(dir_->Sub("linked.c.npy")));
  // A link that stays under the roots is followed as before.
  EXPECT_TRUE(
      client.Cluster(MakeClusterRequest(dir_->Sub("inside"), 3, 2, dir_->Sub("in.c.npy"))).ok());
}

// Before: `threads: 100000` made OpenMP fail to start threads and the exit hang in OpenBLAS
// while holding the job slot. Now threads are capped at the host's cores.
TEST_F(ClusterdIntegration, ThreadsBeyondTheCoresAreRefusedAndTheSlotStaysFree) {
  ClusterdClient client(clusterd_addr_);
  v1::ClusterRequest r = MakeClusterRequest(dir_->Sub("feats"), 3, 2, dir_->Sub("threads.npy"));
  r.set_threads(100000);
  auto res = client.Cluster(r);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("threads: 100000 is not in [0, "), std::string::npos)
      << res.status().message();
  r.set_threads(1);
  EXPECT_TRUE(client.Cluster(r).ok());  // the slot was not held
}

TEST_F(ClusterdIntegration, CancelStopsJobsPromptlyAndQueuedJobsRunAfter) {
  // A job that would run for minutes: 60000 x 32, k = 500, 2000 iterations.
  ASSERT_TRUE(WriteLongJobFeatures(dir_->Sub("big")).ok());
  ClusterdClient client(clusterd_addr_);
  CallControl control;
  std::atomic<int> iterations{0};
  Clock::time_point cancelled_at;
  StatusOr<v1::ClusterResult> long_result = Status::Unknown("not run");
  std::thread long_job([&] {
    long_result = client.Cluster(
        MakeClusterRequest(dir_->Sub("big"), 500, 2000, dir_->Sub("big.npy")),
        [&](const v1::ClusterProgress& p) { iterations += p.has_iteration(); }, &control);
  });
  while (iterations.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  // A second call waits in the queue and says so.
  std::atomic<bool> waiting_note{false};
  StatusOr<v1::ClusterResult> queued_result = Status::Unknown("not run");
  std::thread queued_job([&] {
    queued_result =
        client.Cluster(MakeClusterRequest(dir_->Sub("feats"), 3, 2, dir_->Sub("queued.npy")),
                       [&](const v1::ClusterProgress& p) {
                         if (p.has_note() && p.note().find("queue position 1") != std::string::npos)
                           waiting_note = true;
                       });
  });
  auto wait_start = Clock::now();
  while (!waiting_note.load() && Clock::now() - wait_start < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(waiting_note.load());

  cancelled_at = Clock::now();
  control.Cancel();
  long_job.join();
  double cancel_seconds = std::chrono::duration<double>(Clock::now() - cancelled_at).count();
  ASSERT_FALSE(long_result.ok());
  EXPECT_EQ(long_result.status().code(), StatusCode::kCancelled);
  EXPECT_LT(cancel_seconds, 5.0);
  EXPECT_LT(iterations.load(), 2000);
  queued_job.join();
  ASSERT_TRUE(queued_result.ok()) << queued_result.status().ToString();
  EXPECT_FALSE(PathExists(dir_->Sub("big.npy")));
  // The server noticed the cancel (not just the client): its job slot is free again, and
  // the metrics show it.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string metrics;
  while (Clock::now() < deadline) {
    metrics = HttpGetMetrics(metrics_port_);
    if (metrics.find("mlcd_clusterd_requests_total{code=\"CANCELLED\",method=\"Cluster\"} 1") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(metrics.find("mlcd_clusterd_requests_total{code=\"CANCELLED\",method=\"Cluster\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("mlcd_clusterd_kmeans_iterations_total"), std::string::npos);
  EXPECT_NE(metrics.find("mlcd_clusterd_jobs_running 0"), std::string::npos);

  // Assign: cancel after the first progress message; the half-written label set is removed.
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> c(4096 * 32);
  for (auto& x : c) x = g(rng);
  ASSERT_TRUE(WriteNpy(dir_->Sub("c4096.npy"), NpyDtype::kFloat32, {4096, 32}, c.data()).ok());
  v1::AssignRequest req =
      AssignRequest(dir_->Sub("big"), dir_->Sub("c4096.npy"), 8, "it/cancel/r0");
  req.set_chunk_rows(512);
  CallControl assign_control;
  StatusOr<v1::AssignResult> assigned = client.Assign(
      req,
      [&](const v1::AssignProgress& p) {
        if (p.has_status()) assign_control.Cancel();
      },
      &assign_control);
  ASSERT_FALSE(assigned.ok());
  EXPECT_EQ(assigned.status().code(), StatusCode::kCancelled);
  labelstore::LabelStoreClient store(labelstore_addr_);
  deadline = Clock::now() + std::chrono::seconds(10);
  bool gone = false;
  while (!gone && Clock::now() < deadline) {
    auto sets = store.List("it/cancel/");
    gone = sets.ok() && sets->empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "the cancelled Assign left its label set behind";
}

// Ctrl-C on `mlcdctl cluster` cancels the job on the server: exit code 7 (CANCELLED), no
// centroids written.
TEST_F(ClusterdIntegration, MlcdctlClusterInterruptedCancelsTheJob) {
  ASSERT_TRUE(WriteLongJobFeatures(dir_->Sub("ctl-big")).ok());
  testing::ChildProcess ctl;
  ASSERT_TRUE(
      ctl.Start(testing::BinPath("mlcdctl"),
                {"--clusterd", clusterd_addr_, "cluster", "--features", dir_->Sub("ctl-big"), "--k",
                 "500", "--niter", "2000", "--out", dir_->Sub("ctl-big.npy")},
                dir_->Sub("ctl-interrupt.log"))
          .ok());
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (ctl.Log().find("iteration") == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(ctl.Log().find("iteration"), std::string::npos) << ctl.Log();
  ctl.Signal(SIGINT);
  int status = ctl.Wait(std::chrono::seconds(10));
  ASSERT_NE(status, -1) << "mlcdctl did not exit after SIGINT\n" << ctl.Log();
  ASSERT_TRUE(WIFEXITED(status)) << ctl.Log();
  EXPECT_EQ(WEXITSTATUS(status), 7) << ctl.Log();
  EXPECT_NE(
      ctl.Log().find(
          "interrupted: the k-means job was cancelled on mlcd-clusterd; no centroids were written"),
      std::string::npos)
      << ctl.Log();
  EXPECT_FALSE(PathExists(dir_->Sub("ctl-big.npy")));
}

}  // namespace
}  // namespace mlcd::clusterd
