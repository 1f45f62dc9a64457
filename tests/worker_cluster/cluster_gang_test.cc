// `mlcd-worker cluster-gang` as real processes over Gloo: 1 rank vs 3 ranks on the same
// features and seed draw the same training sample, reach centroids within 1e-5 after every
// iteration and give the same labels; a rank killed mid-run fails the attempt, and the retry
// resumes from the centroid checkpoint and ends with the labels of an undisturbed run; bad
// input is refused with a message naming the numbers.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::TempDir;

at::Tensor Load(const std::string& path) {
  auto a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << path << ": " << a.status().ToString();
  if (!a.ok()) return at::Tensor();
  const auto& h = a->header;
  at::ScalarType t = h.dtype == NpyDtype::kFloat32 ? at::kFloat
                     : h.dtype == NpyDtype::kInt32 ? at::kInt
                                                   : at::kLong;
  return at::from_blob(const_cast<uint8_t*>(a->bytes.data()), h.shape, t).clone();
}

// Mixture rows: 24 directions plus noise, in two shards of unequal size.
void WriteFeatures(const TempDir& dir, int64_t rows, int d) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  at::Tensor centres = at::randn({24, d}, gen);
  at::Tensor which = at::randint(0, 24, {rows}, gen);
  at::Tensor x = centres.index_select(0, which) + 0.7 * at::randn({rows, d}, gen);
  const int64_t first = rows / 3;
  at::Tensor a = x.narrow(0, 0, first).contiguous(), b = x.narrow(0, first, rows - first).contiguous();
  ASSERT_TRUE(WriteNpy(dir.Sub("a.npy"), NpyDtype::kFloat32, {first, d}, a.data_ptr()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("b.npy"), NpyDtype::kFloat32, {rows - first, d}, b.data_ptr()).ok());
}

std::vector<std::string> Args(const TempDir& dir, int world, const std::string& out, int k,
                              int niter, std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {"cluster-gang", "--features", dir.Sub("a.npy"), "--features",
                                dir.Sub("b.npy"), "--k", std::to_string(k), "--niter",
                                std::to_string(niter), "--l", "4", "--seed", "17",
                                "--max-points-per-centroid", "40", "--workspace-mb", "1",
                                "--world-size", std::to_string(world), "--out", out,
                                "--timeout", "60"};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

at::Tensor Concat(const std::string& out, const std::string& what, int world) {
  std::vector<at::Tensor> parts;
  for (int r = 0; r < world; ++r) parts.push_back(Load(out + "/" + what + ".r" + std::to_string(r) + ".npy"));
  return at::cat(parts);
}

TEST(ClusterGang, OneRankAndThreeRanksAgree) {
  TempDir dir;
  WriteFeatures(dir, 9000, 16);
  const int k = 96, niter = 10;  // sample = 96 * 40 = 3840 of 9000 rows
  std::string output;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 1, dir.Sub("w1"), k, niter, {"--trace"}),
                       &output),
            0)
      << output;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 3, dir.Sub("w3"), k, niter, {"--trace"}),
                       &output),
            0)
      << output;
  at::Tensor s1 = Concat(dir.Sub("w1"), "sample", 1), s3 = Concat(dir.Sub("w3"), "sample", 3);
  EXPECT_EQ(s1.numel(), 3840);
  EXPECT_TRUE(s1.equal(s3));
  for (int i = 0; i < niter; ++i) {
    const std::string f = "/trace/iter" + std::to_string(i) + ".npy";
    at::Tensor c1 = Load(dir.Sub("w1") + f), c3 = Load(dir.Sub("w3") + f);
    ASSERT_TRUE(c1.defined() && c3.defined());
    EXPECT_LT((c1 - c3).abs().max().item<double>(), 1e-5) << "iteration " << i;
  }
  at::Tensor l1 = Concat(dir.Sub("w1"), "labels", 1), l3 = Concat(dir.Sub("w3"), "labels", 3);
  ASSERT_EQ(l1.sizes(), (std::vector<int64_t>{9000, 4}));
  EXPECT_TRUE(l1.equal(l3));
}

// The rank processes of the running parent `parent`.
std::vector<pid_t> Children(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  std::vector<pid_t> out;
  pid_t p;
  while (in >> p) out.push_back(p);
  return out;
}

TEST(ClusterGang, KilledRankIsRetriedFromTheCheckpointWithIdenticalLabels) {
  TempDir dir;
  WriteFeatures(dir, 30000, 32);
  const int k = 256, niter = 40;
  std::vector<std::string> extra = {"--checkpoint", dir.Sub("ckpt.bin"), "--checkpoint-every", "2"};
  std::string output;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 3, dir.Sub("clean"), k, niter), &output), 0)
      << output;

  testing::ChildProcess run;
  ASSERT_TRUE(
      run.Start(BinPath("mlcd-worker"), Args(dir, 3, dir.Sub("killed"), k, niter, extra), dir.Sub("run.log"))
          .ok());
  // Wait for the first checkpoint, then kill rank 1 in the middle of the run.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!PathExists(dir.Sub("ckpt.bin")) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(PathExists(dir.Sub("ckpt.bin"))) << run.Log();
  std::vector<pid_t> ranks = Children(run.pid());
  ASSERT_EQ(ranks.size(), 3u) << run.Log();
  ::kill(ranks[1], SIGKILL);
  int status = run.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(WIFEXITED(status)) << run.Log();
  EXPECT_NE(WEXITSTATUS(status), 0) << "the attempt finished before the kill landed: " << run.Log();
  EXPECT_FALSE(PathExists(dir.Sub("killed/centroids.npy")));

  // The retry resumes after the checkpointed iterations and gives the undisturbed labels.
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 3, dir.Sub("retry"), k, niter, extra), &output),
            0)
      << output;
  EXPECT_EQ(output.find("\"resumed_after\": 0"), std::string::npos) << output;
  EXPECT_NE(output.find("\"resumed_after\": "), std::string::npos) << output;
  EXPECT_TRUE(Concat(dir.Sub("clean"), "labels", 3).equal(Concat(dir.Sub("retry"), "labels", 3)));
  EXPECT_TRUE(Load(dir.Sub("clean/centroids.npy")).equal(Load(dir.Sub("retry/centroids.npy"))));
}

TEST(ClusterGang, RefusesBadInputNamingTheNumbers) {
  TempDir dir;
  WriteFeatures(dir, 300, 8);
  std::string output;
  EXPECT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 2, dir.Sub("o"), 301, 2), &output), 2);
  EXPECT_NE(output.find("k = 301 is larger than the number of feature rows (300)"),
            std::string::npos)
      << output;
  std::vector<float> other(5 * 9, 1.0f);
  ASSERT_TRUE(WriteNpy(dir.Sub("b.npy"), NpyDtype::kFloat32, {5, 9}, other.data()).ok());
  EXPECT_EQ(RunCommand(BinPath("mlcd-worker"), Args(dir, 2, dir.Sub("o"), 4, 2), &output), 2);
  EXPECT_NE(output.find("has d = 9"), std::string::npos) << output;
}

}  // namespace
}  // namespace mlcd
