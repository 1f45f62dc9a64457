// clustering.engine "gang" end to end on loopback: the real services and two `mlcd-worker
// agent` slots; CLUSTERING and ASSIGNING run as CLUSTER and ASSIGN_LABELS gangs of
// `mlcd-worker cluster-gang` children over Gloo, which write the round's label set into the
// real label store; the coordinator seals it. The labels are compared with one process's
// run of the same algorithm (`mlcd-worker cluster-gang --world-size 1`), undisturbed and after
// a rank was SIGKILLed in the middle of k-means.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <thread>

#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/host_memory.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/two_worker_fixture.h"
#include "tests/testing/http.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// n x d float32 rows around `centres` random centres (a mixture of Gaussians), seeded.
void WriteClusteredFeatures(const std::string& path, int64_t n, int64_t d, int centres) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> c(static_cast<size_t>(centres * d)), x(static_cast<size_t>(n * d));
  for (float& v : c) v = g(rng);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = static_cast<int64_t>(rng() % centres);
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = c[k * d + j] + 0.4f * g(rng);
  }
  ASSERT_TRUE(WriteNpy(path, NpyDtype::kFloat32, {n, d}, x.data()).ok());
}

// An MNIST-style train split of `n` 28 x 28 images (uncompressed IDX files) in `dir`.
void WriteIdxSplit(const std::string& dir, uint32_t n) {
  auto be = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string pixels(static_cast<size_t>(n) * 28 * 28, '\0'), labels(n, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 7 % 251);
  for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<char>(i % 10);
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/train-images-idx3-ubyte",
                                  be(0x803) + be(n) + be(28) + be(28) + pixels)
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/train-labels-idx1-ubyte", be(0x801) + be(n) + labels).ok());
}

// A float32 `rows` x d .npy whose data is one hole: the header, then the file extended with
// ftruncate, so it takes no disk and reads as zeros.
void WriteSparseFeatures(const std::string& path, int64_t rows, int64_t d) {
  const std::string header = EncodeNpyHeader(NpyDtype::kFloat32, {rows, d});
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, header.data(), header.size()), static_cast<ssize_t>(header.size()));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(header.size() + rows * d * 4)), 0);
  ::close(fd);
}

// Bytes of `path` in the page cache (mincore over a map of the whole file, 1 GiB at a time).
int64_t CachedBytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  int64_t cached = 0;
  const int64_t window = int64_t{1} << 30;
  std::vector<unsigned char> resident(static_cast<size_t>(window / page));
  for (int64_t off = 0; off < st.st_size; off += window) {
    const size_t len = static_cast<size_t>(std::min<int64_t>(window, st.st_size - off));
    void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off);
    if (map == MAP_FAILED) {
      cached = -1;
      break;
    }
    if (::mincore(map, len, resident.data()) == 0) {
      for (size_t i = 0; i < (len + page - 1) / page; ++i) cached += (resident[i] & 1) * page;
    }
    ::munmap(map, len);
  }
  ::close(fd);
  return cached;
}

// The top-l labels of `n` rows as one process computes them: rank 0's labels.r0.npy.
std::vector<int64_t> OneProcessLabels(const TempDir& dir, const std::string& features, int k,
                                      int l, int niter, int seed) {
  const std::string out = dir.Sub("one-process");
  std::string log;
  EXPECT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"cluster-gang", "--features", features, "--k", std::to_string(k), "--l",
                        std::to_string(l), "--niter", std::to_string(niter), "--seed",
                        std::to_string(seed), "--out", out, "--threads", "1"},
                       &log),
            0)
      << log;
  auto labels = ReadNpyAsInt64(out + "/labels.r0.npy");
  EXPECT_TRUE(labels.ok()) << labels.status().ToString();
  return labels.ok() ? *labels : std::vector<int64_t>();
}

// The rows 0 .. n-1 of a label set, n x l.
std::vector<int64_t> StoredLabels(const std::string& address, const std::string& set, int64_t n) {
  labelstore::LabelStoreClient client(address);
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<uint64_t>(i);
  auto batch = client.GetLabels(set, ids);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  if (!batch.ok()) return {};
  EXPECT_TRUE(batch->missing_indices.empty()) << batch->missing_indices.size() << " rows missing";
  return std::vector<int64_t>(batch->labels.begin(), batch->labels.end());
}

// The entries of a folder (0 when it is missing).
int DirEntries(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return 0;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  ::closedir(d);
  return n;
}

// The sum of a Prometheus series' samples in a service's /metrics (HOST:PORT), or -1 when
// the scrape fails or names no such series.
double MetricSum(const std::string& metrics_address, const std::string& name) {
  const int port = std::atoi(metrics_address.substr(metrics_address.rfind(':') + 1).c_str());
  const std::string text = HttpGet(port, "/metrics");
  double sum = -1;
  size_t at = 0;
  while ((at = text.find("\n" + name, at)) != std::string::npos) {
    at += 1 + name.size();
    if (text[at] != ' ' && text[at] != '{') continue;
    const size_t space = text.find(' ', text[at] == '{' ? text.find('}', at) : at);
    sum = std::max(sum, 0.0) + std::atof(text.c_str() + space + 1);
  }
  return sum;
}

std::vector<v1::AssignmentKind> GangKinds(const v1::Job& job) {
  std::vector<v1::AssignmentKind> kinds;
  for (const auto& h : job.history())
    if (h.kind() == "gang_started") kinds.push_back(h.assignment_kind());
  return kinds;
}

// Process ids of `mlcd-worker cluster-gang` children whose command line mentions `needle`.
std::vector<pid_t> ClusterGangProcesses(const std::string& needle) {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (!d) return pids;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    auto cmdline = ReadFileToString("/proc/" + std::string(e->d_name) + "/cmdline");
    if (!cmdline.ok()) continue;
    std::string text = *cmdline;
    for (char& c : text) c = c == '\0' ? ' ' : c;
    if (text.find(needle) != std::string::npos && text.find(" cluster-gang ") != std::string::npos)
      pids.push_back(pid);
  }
  ::closedir(d);
  return pids;
}

class GangClusteringTest : public TwoWorkerClusterTest {
 protected:
  // The job once it ended, with its history.
  StatusOr<v1::Job> Ended(const std::string& id, seconds timeout) {
    auto job = cluster_->WaitForJob(
        id, [](const v1::Job& j) { return IsTerminal(j.state()); }, timeout);
    if (!job.ok()) return job.status();
    return cluster_->Get(id, true);
  }
};

// Round 0 on .npy features, round 1 on the model's own extracted features, both clustered and
// labelled by the workers; round 0's labels equal one process's.
TEST_F(GangClusteringTest, JobOnTheGangEngineSucceedsOverBothRounds) {
  const std::string features = dir_.Sub("features.npy");
  WriteClusteredFeatures(features, 384, 16, 12);
  TinyJob spec;
  spec.rounds = 2;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  spec.clustering_fields = "engine: gang, seed: 5";
  auto submitted = cluster_->Submit(spec.Yaml(), "gang-e2e");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = Ended(submitted->id(), seconds(300));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  EXPECT_EQ(job->restarts(), 0);
  EXPECT_EQ(GangKinds(*job),
            (std::vector<v1::AssignmentKind>{
                v1::ASSIGNMENT_KIND_CLUSTER, v1::ASSIGNMENT_KIND_ASSIGN_LABELS,
                v1::ASSIGNMENT_KIND_TRAIN, v1::ASSIGNMENT_KIND_EXTRACT, v1::ASSIGNMENT_KIND_CLUSTER,
                v1::ASSIGNMENT_KIND_ASSIGN_LABELS, v1::ASSIGNMENT_KIND_TRAIN}));
  for (const auto& h : job->history()) {
    if (h.kind() == "gang_started") {
      EXPECT_EQ(h.world_size(), 2) << h.message();
    }
  }
  ASSERT_EQ(job->rounds_size(), 2);
  for (int r = 0; r < 2; ++r) {
    const v1::RoundStatus& round = job->rounds(r);
    EXPECT_TRUE(round.clustered() && round.labels_written() && round.assigned() && round.trained());
    EXPECT_EQ(round.label_set(), "job/" + job->id() + "/r" + std::to_string(r));
    EXPECT_EQ(round.cluster().k(), spec.k);
    EXPECT_EQ(round.cluster().num_points(), static_cast<uint64_t>(spec.limit));
    EXPECT_EQ(round.assign().num_samples(), static_cast<uint64_t>(spec.limit));
    EXPECT_EQ(round.assign().label_set_samples(), static_cast<uint64_t>(spec.limit));
    // The top-1 sizes were reduced over both ranks.
    EXPECT_NEAR(round.assign().sizes().mean() * spec.k, spec.limit, 1e-6);
    auto centroids = ReadNpy(round.centroids_path());
    ASSERT_TRUE(centroids.ok()) << centroids.status().ToString();
    EXPECT_EQ(centroids->header.shape[0], spec.k);
  }
  EXPECT_EQ(job->rounds(0).cluster().d(), 16);
  EXPECT_EQ(job->rounds(1).cluster().d(), 32);  // the model's embeddings
  // Round 1's A.8 quality, reduced over the ranks: the extracted shards carry the classes.
  ASSERT_TRUE(job->rounds(1).assign().has_quality());
  EXPECT_EQ(job->rounds(1).assign().quality().num_classes(), 10u);
  EXPECT_GE(job->rounds(1).assign().quality().topl_recall(),
            job->rounds(1).assign().quality().top1_recall());
  EXPECT_GT(job->rounds(1).assign().quality().top1_recall(), 0.1);

  const std::vector<int64_t> stored =
      StoredLabels(cluster_->labelstore_address(), job->rounds(0).label_set(), spec.limit);
  const std::vector<int64_t> expected = OneProcessLabels(dir_, features, spec.k, spec.l, spec.niter, 5);
  ASSERT_EQ(stored.size(), static_cast<size_t>(spec.limit * spec.l));
  EXPECT_EQ(stored, expected) << "the 2-rank gang's labels differ from one process's";
}

// One spec with clustering.seed unset, run once on each engine: the seed is defaulted at
// submit and both engines derive the round's seed from it, so clusterd's FAISS and the gang
// give the same label set.
TEST_F(GangClusteringTest, OneSpecWithTheSeedUnsetGivesTheSameLabelsOnBothEngines) {
  const std::string features = dir_.Sub("features.npy");
  WriteClusteredFeatures(features, 384, 16, 12);
  std::vector<std::vector<int64_t>> labels;
  TinyJob spec;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  for (const std::string engine : {"clusterd", "gang"}) {
    spec.clustering_fields = "engine: " + engine;
    auto submitted = cluster_->Submit(spec.Yaml(), "unset-seed-" + engine);
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    EXPECT_EQ(submitted->spec().clustering().seed(), kDefaultClusteringSeed) << engine;
    auto job = Ended(submitted->id(), seconds(300));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << engine << ": " << job->message();
    const std::vector<v1::AssignmentKind> kinds = GangKinds(*job);
    ASSERT_FALSE(kinds.empty()) << engine;
    EXPECT_EQ(kinds.front(),
              engine == "gang" ? v1::ASSIGNMENT_KIND_CLUSTER : v1::ASSIGNMENT_KIND_TRAIN)
        << engine;
    labels.push_back(
        StoredLabels(cluster_->labelstore_address(), job->rounds(0).label_set(), spec.limit));
    ASSERT_EQ(labels.back().size(), static_cast<size_t>(spec.limit * spec.l)) << engine;
  }
  // Each row's top-1 and its set of l labels (the order of near-equal scores below the first
  // may differ between FAISS's and the gang's arithmetic).
  int same_top1 = 0, same_set = 0;
  for (int i = 0; i < spec.limit; ++i) {
    const auto a = labels[0].begin() + i * spec.l, b = labels[1].begin() + i * spec.l;
    same_top1 += *a == *b;
    same_set += std::is_permutation(a, a + spec.l, b);
  }
  EXPECT_EQ(same_top1, spec.limit) << "rows whose top-1 label differs between the engines";
  EXPECT_EQ(same_set, spec.limit) << "rows whose labels differ between the engines";
}

// Round-0 features of the dataset (random-projection) computed by the gang's ranks, each its
// own rows: clusterd is never asked (no feature cache, no rows read), and the labels equal one
// process's run on the file clusterd itself writes for the same features: the rows are the same.
TEST_F(GangClusteringTest, GeneratedRoundZeroFeaturesAreTheGangsOwn) {
  TinyJob spec;
  spec.epochs = 1;
  spec.max_steps_per_epoch = 1;
  spec.features = "{kind: random-projection, dim: 24, seed: 4}";
  spec.clustering_fields = "engine: gang, seed: 5";
  auto submitted = cluster_->Submit(spec.Yaml(), "gang-generated");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = Ended(submitted->id(), seconds(120));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  EXPECT_EQ(GangKinds(*job),
            (std::vector<v1::AssignmentKind>{v1::ASSIGNMENT_KIND_CLUSTER,
                                             v1::ASSIGNMENT_KIND_ASSIGN_LABELS,
                                             v1::ASSIGNMENT_KIND_TRAIN}));
  const v1::RoundStatus& round = job->rounds(0);
  EXPECT_EQ(round.feature_paths_size(), 0);
  EXPECT_EQ(round.generated_features().kind(), "random-projection");
  EXPECT_EQ(round.cluster().d(), 24);
  EXPECT_EQ(round.cluster().num_points(), static_cast<uint64_t>(spec.limit));
  EXPECT_EQ(round.assign().label_set_samples(), static_cast<uint64_t>(spec.limit));
  // The A.8 quality from the dataset's labels, reduced over both ranks.
  ASSERT_TRUE(round.assign().has_quality());
  EXPECT_EQ(round.assign().quality().num_classes(), 10u);
  EXPECT_EQ(DirEntries(cluster_->coordinator_data_dir() + "/features"), 0)
      << "clusterd wrote round-0 features into its cache";
  EXPECT_EQ(MetricSum(cluster_->clusterd_metrics(), "mlcd_clusterd_rows_read_total"), 0)
      << "clusterd read feature rows";

  const std::string file = dir_.Sub("clusterd-features.npy");
  std::string log;
  ASSERT_EQ(RunCommand(BinPath("mlcd-clusterd"),
                       {"features", "--kind", "random-projection", "--split", "train", "--limit",
                        std::to_string(spec.limit), "--dim", "24", "--seed", "4", "--out", file},
                       &log),
            0)
      << log;
  const std::vector<int64_t> stored =
      StoredLabels(cluster_->labelstore_address(), round.label_set(), spec.limit);
  ASSERT_EQ(stored.size(), static_cast<size_t>(spec.limit * spec.l));
  EXPECT_EQ(stored, OneProcessLabels(dir_, file, spec.k, spec.l, spec.niter, 5))
      << "the gang's labels differ from one process's on clusterd's feature file";
}

// A rank SIGKILLed after the first centroid checkpoint: the gang is formed again, resumes
// k-means from the checkpoint, and the job's labels are those of an undisturbed run.
TEST_F(GangClusteringTest, RankKilledMidKMeansResumesFromTheCheckpoint) {
  const std::string features = dir_.Sub("features.npy");
  const int64_t n = 40000;
  WriteClusteredFeatures(features, n, 128, 500);
  TinyJob spec;
  spec.limit = static_cast<int>(n);
  spec.k = 384;
  spec.niter = 60;
  spec.epochs = 1;
  spec.max_steps_per_epoch = 1;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  spec.clustering_fields = "engine: gang, seed: 3";
  auto submitted = cluster_->Submit(spec.Yaml(), "gang-kill");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string checkpoint =
      cluster_->coordinator_data_dir() + "/jobs/" + submitted->id() + "/r0/centroids.npy.ckpt";
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (!PathExists(checkpoint) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(PathExists(checkpoint)) << "no centroid checkpoint appeared";
  const std::vector<pid_t> victims = ClusterGangProcesses(cluster_->WorkerDataDir(1));
  ASSERT_EQ(victims.size(), 1u);
  ASSERT_EQ(::kill(victims[0], SIGKILL), 0);

  auto job = Ended(submitted->id(), seconds(300));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  EXPECT_EQ(job->restarts(), 1);
  const std::vector<v1::AssignmentKind> kinds = GangKinds(*job);
  ASSERT_GE(kinds.size(), 3u);
  EXPECT_EQ(kinds[0], v1::ASSIGNMENT_KIND_CLUSTER);
  EXPECT_EQ(kinds[1], v1::ASSIGNMENT_KIND_CLUSTER);
  // The second CLUSTER gang's k-means went on after the checkpoint's iterations.
  int first_resumed_iteration = 0;
  for (int w = 0; w < 2; ++w) {
    for (const auto& [assignment, events] : ProgressEvents(cluster_->WorkerDataDir(w))) {
      if (assignment.find("-a2-") == std::string::npos) continue;
      for (const auto& e : events) {
        if (e.value("phase", "") != "k-means") continue;
        const int it = e.value("rows_done", 0);
        if (first_resumed_iteration == 0 || it < first_resumed_iteration) first_resumed_iteration = it;
      }
    }
  }
  EXPECT_GT(first_resumed_iteration, 5) << "the retried gang started k-means from scratch";
  const std::vector<int64_t> stored =
      StoredLabels(cluster_->labelstore_address(), job->rounds(0).label_set(), n);
  const std::vector<int64_t> expected = OneProcessLabels(dir_, features, spec.k, spec.l, spec.niter, 3);
  ASSERT_EQ(stored.size(), static_cast<size_t>(n * spec.l));
  EXPECT_EQ(stored, expected) << "labels after the retried gang differ from an undisturbed run";
}

// A job cancelled during ASSIGNING, once the coordinator created the round's OPEN set for the
// labelling gang: the partial set is deleted, never left in the label store.
TEST_F(GangClusteringTest, CancelDuringAssigningDeletesThePartialLabelSet) {
  const std::string features = dir_.Sub("features.npy");
  const int64_t n = 20000;
  WriteClusteredFeatures(features, n, 32, 64);
  TinyJob spec;
  spec.limit = static_cast<int>(n);
  spec.k = 64;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  spec.clustering_fields = "engine: gang";
  auto submitted = cluster_->Submit(spec.Yaml(), "gang-cancel");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto assigning = cluster_->WaitForJob(
      submitted->id(),
      [](const v1::Job& j) {
        return IsTerminal(j.state()) || j.state() == v1::JOB_STATE_TRAINING ||
               (j.state() == v1::JOB_STATE_ASSIGNING && j.rounds_size() == 1 &&
                !j.rounds(0).label_set().empty());
      },
      seconds(120));
  ASSERT_TRUE(assigning.ok()) << assigning.status().ToString();
  ASSERT_EQ(assigning->state(), v1::JOB_STATE_ASSIGNING) << assigning->message();
  const std::string set = "job/" + submitted->id() + "/r0";
  ASSERT_EQ(assigning->rounds(0).label_set(), set);
  labelstore::LabelStoreClient store(cluster_->labelstore_address());
  ASSERT_TRUE(store.Describe(set).ok()) << "the OPEN set for the gang was not created";

  ASSERT_TRUE(cluster_->Cancel(submitted->id()).ok());
  auto job = Ended(submitted->id(), seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), v1::JOB_STATE_CANCELLED) << job->message();
  EXPECT_FALSE(job->rounds(0).assigned());
  // The deletion runs on a phase thread of its own, after the cancel returned.
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  StatusOr<v1::LabelSetInfo> info = store.Describe(set);
  while (info.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    info = store.Describe(set);
  }
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound)
      << "the cancelled job's partial set " << set << " is still in the label store: "
      << (info.ok() ? info->DebugString() : info.status().ToString());
  auto listed = store.List("job/" + submitted->id() + "/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty()) << listed->size() << " sets of the cancelled job remain";
}

// Features twice the host's available memory (a sparse file: no disk, no memory): each rank
// refuses before it loads anything, naming the bytes and the world size that would fit, and
// the job FAILS without the file being read.
TEST_F(GangClusteringTest, FeaturesAboveTheHostsMemoryAreRefusedUnread) {
  const int64_t available = HostBytesAvailable();
  ASSERT_GT(available, 0) << "no MemAvailable in /proc/meminfo";  // nor a cgroup limit
  const int64_t d = 64, rows = 2 * available / (d * 4) + 1;
  const std::string features = dir_.Sub("huge.npy");
  WriteSparseFeatures(features, rows, d);
  TinyJob spec;
  spec.k = 8;
  spec.max_restarts = 0;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  spec.clustering_fields = "engine: gang";
  const auto start = std::chrono::steady_clock::now();
  auto submitted = cluster_->Submit(spec.Yaml(), "gang-huge");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  auto job = Ended(submitted->id(), seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED) << job->message();
  for (const std::string& expected :
       {std::string("RESOURCE_EXHAUSTED"), std::string("the gang's clustering needs "),
        std::to_string((rows + 1) / 2) + " x d 64 float32", std::string("free; a world size of "),
        std::string("(training.world_size), or lower clustering.k")}) {
    EXPECT_NE(job->message().find(expected), std::string::npos)
        << "'" << expected << "' not in: " << job->message();
  }
  EXPECT_EQ(GangKinds(*job), std::vector<v1::AssignmentKind>{v1::ASSIGNMENT_KIND_CLUSTER});
  EXPECT_LT(took, 30) << "the refusal took " << took << " s";
  const int64_t cached = CachedBytes(features);
  EXPECT_LT(cached, int64_t{64} << 20) << cached << " bytes of the features were read";
}

// What the gang cannot run is refused with the numbers: at submit (an approximate search), and
// before the gang starts (feature files of different dimensions, k above the rows of the
// files or of the dataset's generated features).
TEST_F(GangClusteringTest, RefusalsNameTheNumbers) {
  TinyJob spec;
  const std::string a = dir_.Sub("a.npy"), b = dir_.Sub("b.npy"), small = dir_.Sub("small.npy");
  WriteClusteredFeatures(a, 200, 16, 4);
  WriteClusteredFeatures(b, 184, 8, 4);
  WriteClusteredFeatures(small, 100, 16, 4);
  spec.features = "{kind: npy, paths: [" + a + "]}";
  spec.clustering_fields = "engine: gang, search: hnsw";
  auto hnsw = cluster_->Submit(spec.Yaml());
  ASSERT_FALSE(hnsw.ok());
  EXPECT_NE(hnsw.status().message().find("engine 'gang' searches exactly"), std::string::npos)
      << hnsw.status().ToString();

  spec.clustering_fields = "engine: gang";
  spec.features = "{kind: npy, paths: [" + a + ", " + b + "]}";
  auto mixed = cluster_->Submit(spec.Yaml(), "gang-mixed-d");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  spec.features = "{kind: npy, paths: [" + small + "]}";
  spec.k = 120;
  auto few = cluster_->Submit(spec.Yaml(), "gang-few-rows");
  ASSERT_TRUE(few.ok()) << few.status().ToString();
  // Generated features: the rows of the dataset's split bound k, not the spec's limit alone.
  const std::string data = dir_.Sub("mnist-100");
  WriteIdxSplit(data, 100);
  spec.features = "{kind: pixels}";
  std::string yaml = spec.Yaml();
  yaml.replace(yaml.find("dataset: {"), 10, "dataset: {path: '" + data + "', ");
  auto generated = cluster_->Submit(yaml, "gang-generated-few-rows");
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  for (const auto& [id, expected] :
       std::vector<std::pair<std::string, std::string>>{
           {mixed->id(), "feature dimensions differ: " + a + " has d = 16, " + b + " has d = 8"},
           {few->id(), "clustering.k = 120 > the 100 feature rows"},
           {generated->id(), "clustering.k = 120 > the 100 feature rows of the pixels features of " +
                                 data + "/train-images-idx3-ubyte"}}) {
    auto job = Ended(id, seconds(60));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
    EXPECT_NE(job->message().find(expected), std::string::npos) << job->message();
    EXPECT_EQ(job->attempts(), 0) << "a gang started for a round that cannot be clustered";
  }
}

}  // namespace
}  // namespace mlcd::testing
