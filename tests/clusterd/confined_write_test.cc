// The real mlcd-clusterd: a Cluster call's centroids_out is checked against the data roots
// when the call arrives, but written only when the k-means job ends (after waiting in the
// queue behind a running job). Before, a folder of that path swapped for a symbolic link in
// between redirected the write outside the roots; now the folder is opened and verified
// again at write time and the file created inside that descriptor
// (common/confined_file.h). The swap happens while the call waits in the queue, so the race
// is reproduced deterministically.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "clients/clusterd_client.h"
#include "clusterd/feature_gen.h"
#include "common/file_util.h"
#include "common/net.h"
#include "tests/clusterd/request_helpers.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

using Clock = std::chrono::steady_clock;

TEST(ClusterdConfinedWrite, AFolderSwappedForALinkWhileTheCallIsQueuedIsRefused) {
  testing::TempDir root, outside;
  const std::string addr = "127.0.0.1:" + std::to_string(PickFreePort());
  testing::ChildProcess clusterd;
  // Cluster never dials the label store; the flag only has to be there.
  ASSERT_TRUE(clusterd
                  .Start(testing::BinPath("mlcd-clusterd"),
                         {"--listen", addr, "--metrics-listen", "", "--data-dir", root.Sub("cd"),
                          "--labelstore", "127.0.0.1:1", "--data-root", root.path()},
                         root.Sub("clusterd.log"), {"MLCD_NO_BLAS_TUNING=1", "OMP_NUM_THREADS=2"})
                  .ok());
  ASSERT_TRUE(testing::WaitForServing(addr, std::chrono::seconds(30)).ok()) << clusterd.Log();
  SyntheticMixtureOptions o;
  o.rows = 20000;
  o.num_centres = 50;
  o.out_dir = root.Sub("feats");
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  ASSERT_TRUE(MakeDirs(root.Sub("out")).ok());

  // A job that runs until cancelled holds the slot.
  ClusterdClient client(addr);
  CallControl control;
  std::atomic<int> iterations{0};
  StatusOr<v1::ClusterResult> blocker = Status::Unknown("not run");
  std::thread running([&] {
    blocker = client.Cluster(
        MakeClusterRequest(root.Sub("feats"), 200, 100000, root.Sub("long.npy")),
        [&](const v1::ClusterProgress& p) { iterations += p.has_iteration(); }, &control);
  });
  while (iterations.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  // The call is checked (root/out/c.npy is inside) and waits in the queue.
  const std::string out = root.Sub("out/c.npy");
  std::atomic<bool> queued{false};
  StatusOr<v1::ClusterResult> swapped = Status::Unknown("not run");
  std::thread waiting([&] {
    swapped = client.Cluster(MakeClusterRequest(root.Sub("feats"), 3, 2, out),
                             [&](const v1::ClusterProgress& p) {
                               if (p.note().find("queue position 1") != std::string::npos)
                                 queued = true;
                             });
  });
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!queued.load() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(queued.load()) << clusterd.Log();

  // root/out becomes a link to a folder outside the roots, then the queued call runs.
  ASSERT_EQ(::rename(root.Sub("out").c_str(), root.Sub("out.old").c_str()), 0);
  ASSERT_EQ(::symlink(outside.path().c_str(), root.Sub("out").c_str()), 0);
  control.Cancel();
  running.join();
  waiting.join();
  EXPECT_EQ(blocker.status().code(), StatusCode::kCancelled) << blocker.status().ToString();

  // Refused like a path outside the roots (checked when the call arrives), nothing written.
  const std::string direct = outside.Sub("c.npy");
  const std::string outside_refusal = RefusalNamingPath(
      client.Cluster(MakeClusterRequest(root.Sub("feats"), 3, 2, direct)).status(), direct);
  EXPECT_EQ(RefusalNamingPath(swapped.status(), out), outside_refusal);
  EXPECT_EQ(outside_refusal.find(outside.path()), std::string::npos) << outside_refusal;
  EXPECT_FALSE(PathExists(outside.Sub("c.npy")));
  EXPECT_EQ(::rmdir(outside.path().c_str()), 0) << "something was created outside the roots";
  ASSERT_EQ(::mkdir(outside.path().c_str(), 0700), 0);

  // A link that stays under the roots is followed as before.
  ASSERT_EQ(::symlink(root.Sub("out.old").c_str(), root.Sub("alias").c_str()), 0);
  auto inside =
      client.Cluster(MakeClusterRequest(root.Sub("feats"), 3, 2, root.Sub("alias/c.npy")));
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
  EXPECT_TRUE(PathExists(root.Sub("out.old/c.npy")));
}

}  // namespace
}  // namespace mlcd::clusterd
