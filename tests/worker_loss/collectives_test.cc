// Collectives over real Gloo process groups on loopback: every rank is a thread of this test
// process with its own ProcessGroupGloo (its own TCP connections), rank 0 serving the store.
#include "worker/dist/collectives.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "common/net.h"
#include "tests/worker_loss/run_ranks.h"

namespace mlcd::worker {
namespace {

using std::chrono::milliseconds;

TEST(CollectivesTest, LocalWorldIsANoOp) {
  auto comm = Collectives::Local();
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_STREQ(comm->backend_name(), "local");
  at::Tensor t = at::arange(6, at::kFloat);
  ASSERT_TRUE(comm->AllReduce(t).ok());
  EXPECT_TRUE(t.equal(at::arange(6, at::kFloat)));
  at::Tensor gathered, scattered;
  ASSERT_TRUE(comm->AllGather(t.view({2, 3}), &gathered).ok());
  EXPECT_TRUE(gathered.equal(t.view({2, 3})));
  ASSERT_TRUE(comm->ReduceScatter(t.view({3, 2}), &scattered).ok());
  EXPECT_TRUE(scattered.equal(t.view({3, 2})));
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(CollectivesTest, CreateRejectsBadOptions) {
  CollectivesOptions opts;
  opts.world_size = 2;
  opts.rank = 2;
  opts.rendezvous = "127.0.0.1:1234";
  EXPECT_EQ(Collectives::Create(opts).status().code(), StatusCode::kInvalidArgument);
  opts.rank = 0;
  opts.rendezvous = "nocolon";
  EXPECT_EQ(Collectives::Create(opts).status().code(), StatusCode::kInvalidArgument);
  opts.rendezvous = "127.0.0.1:29500";
  opts.device = c10::Device(c10::kCUDA, 0);
#ifndef MLCD_WITH_NCCL
  auto s = Collectives::Create(opts).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("MLCD_WITH_CUDA"), std::string::npos) << s.message();
#endif
  opts.device = c10::Device(c10::kMeta);
  auto meta = Collectives::Create(opts).status();
  EXPECT_EQ(meta.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(meta.message().find("not meta"), std::string::npos) << meta.message();
}

TEST(CollectivesTest, ThreeRanksAllOperations) {
  RunRanks(3, [](int r, Collectives& comm) {
    EXPECT_STREQ(comm.backend_name(), "gloo");
    // Sum and max.
    at::Tensor t = at::full({4}, static_cast<float>(r + 1));
    ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kSum).ok());
    EXPECT_TRUE(t.equal(at::full({4}, 6.0f)));
    at::Tensor m = at::tensor(std::vector<double>{1.0 * r, -1.0 * r});
    ASSERT_TRUE(comm.AllReduce(m, ReduceOp::kMax).ok());
    EXPECT_TRUE(m.equal(at::tensor(std::vector<double>{2.0, 0.0})));
    // Fused, mixed dtypes, non-contiguous member, tiny buckets (several collectives).
    std::vector<at::Tensor> many{at::full({3, 2}, 1.0f * r), at::full({5}, static_cast<int64_t>(r)),
                                 at::full({2, 3}, 2.0f).t(), at::full({7}, 1.0)};
    ASSERT_TRUE(comm.AllReduce(many, ReduceOp::kSum, /*bucket_bytes=*/16).ok());
    EXPECT_TRUE(many[0].equal(at::full({3, 2}, 3.0f)));
    EXPECT_TRUE(many[1].equal(at::full({5}, static_cast<int64_t>(3))));
    EXPECT_TRUE(many[2].equal(at::full({3, 2}, 6.0f)));
    EXPECT_TRUE(many[3].equal(at::full({7}, 3.0)));
    // Allgather: rank r contributes rows [r*10, r*10+1].
    at::Tensor rows = at::tensor(std::vector<float>{r * 10.0f, r * 10.0f + 1}).view({2, 1});
    at::Tensor all;
    ASSERT_TRUE(comm.AllGather(rows, &all).ok());
    EXPECT_TRUE(all.view({-1}).equal(at::tensor(std::vector<float>{0, 1, 10, 11, 20, 21})));
    // Reduce-scatter: input rows q are (r+1)*q; chunk of rank r sums to 6*q for q in its rows.
    at::Tensor in = (at::arange(6, at::kFloat) * (r + 1)).view({6, 1});
    at::Tensor out;
    ASSERT_TRUE(comm.ReduceScatter(in, &out).ok());
    EXPECT_TRUE(
        out.view({-1}).equal(at::tensor(std::vector<float>{6.0f * (2 * r), 6.0f * (2 * r + 1)})));
    // Broadcast from rank 2.
    std::vector<at::Tensor> b{at::full({2}, 1.0f * r), at::full({1}, static_cast<int64_t>(r))};
    ASSERT_TRUE(comm.Broadcast(b, 2).ok());
    EXPECT_TRUE(b[0].equal(at::full({2}, 2.0f)));
    EXPECT_EQ(b[1].item<int64_t>(), 2);
    EXPECT_TRUE(comm.Barrier().ok());
    EXPECT_EQ(comm.ReduceScatter(at::zeros({4}), &out).code(), StatusCode::kInvalidArgument);
  });
}

TEST(CollectivesTest, TwoGroupsShareOneRendezvous) {
  std::string rendezvous = "127.0.0.1:" + std::to_string(PickFreePort());
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::unique_ptr<Collectives>> groups;
      for (const char* prefix : {"backbone", "pfc"}) {
        CollectivesOptions opts;
        opts.rank = r;
        opts.world_size = 2;
        opts.rendezvous = rendezvous;
        opts.timeout = milliseconds(20000);
        opts.store_prefix = prefix;
        auto comm = Collectives::Create(opts);
        ASSERT_TRUE(comm.ok()) << prefix << ": " << comm.status().ToString();
        groups.push_back(std::move(comm).value());
      }
      at::Tensor a = at::full({2}, 1.0f + r), b = at::full({3}, 10.0f * (r + 1));
      ASSERT_TRUE(groups[0]->AllReduce(a).ok());
      ASSERT_TRUE(groups[1]->AllReduce(b).ok());
      EXPECT_TRUE(a.equal(at::full({2}, 3.0f)));
      EXPECT_TRUE(b.equal(at::full({3}, 30.0f)));
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CollectivesTest, DeadPeerFailsInsteadOfHanging) {
  // Rank 1 leaves (its group is destroyed, closing its connections) while rank 0 waits in an
  // allreduce: rank 0 must get an error well before its 60 s timeout.
  RunRanks(
      2,
      [](int r, Collectives& comm) {
        ASSERT_TRUE(comm.Barrier().ok());
        if (r == 1) return;
        auto start = std::chrono::steady_clock::now();
        at::Tensor t = at::ones({8});
        Status s = comm.AllReduce(t);
        EXPECT_FALSE(s.ok());
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
        EXPECT_TRUE(s.code() == StatusCode::kUnavailable ||
                    s.code() == StatusCode::kDeadlineExceeded)
            << s.ToString();
        // Sticky: the group is unusable afterwards.
        Status again = comm.Barrier();
        EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
      },
      milliseconds(60000));
}

TEST(CollectivesTest, SilentPeerTimesOut) {
  // Rank 1 stays alive but never joins the collective: rank 0 gets DEADLINE_EXCEEDED.
  std::atomic<bool> done{false};
  RunRanks(
      2,
      [&](int r, Collectives& comm) {
        ASSERT_TRUE(comm.Barrier().ok());
        if (r == 1) {
          while (!done.load()) std::this_thread::sleep_for(milliseconds(20));
          return;
        }
        at::Tensor t = at::ones({8});
        Status s = comm.AllReduce(t);
        done = true;
        EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
      },
      milliseconds(3000));
}

TEST(CollectivesTest, MissingRankZeroTimesOut) {
  CollectivesOptions opts;
  opts.rank = 1;
  opts.world_size = 2;
  opts.rendezvous = "127.0.0.1:" + std::to_string(PickFreePort());
  opts.timeout = milliseconds(1000);
  auto comm = Collectives::Create(opts);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("rendezvous"), std::string::npos)
      << comm.status().ToString();
}

// Rank 0 cannot serve the store where another process listens: ALREADY_EXISTS, recognised
// by IsRendezvousPortTaken (the local launcher then starts the gang on another port).
TEST(CollectivesTest, TakenRendezvousPortIsReportedAsSuch) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  CollectivesOptions opts;
  opts.rank = 0;
  opts.world_size = 2;
  opts.rendezvous = "127.0.0.1:" + std::to_string(port);
  opts.timeout = milliseconds(1000);
  auto comm = Collectives::Create(opts);
  ::close(fd);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kAlreadyExists) << comm.status().ToString();
  EXPECT_TRUE(IsRendezvousPortTaken(comm.status())) << comm.status().ToString();
  EXPECT_NE(comm.status().message().find(std::to_string(port)), std::string::npos);

  // Other failures are not mistaken for it.
  EXPECT_FALSE(IsRendezvousPortTaken(Status::AlreadyExists("out/labels.npy exists")));
  EXPECT_FALSE(IsRendezvousPortTaken(Status::Unavailable("rank 1 connecting failed")));
}

// The ports PickFreePort gives lie below the kernel's ephemeral range and are free.
TEST(CollectivesTest, PickedPortsAreFreeAndBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int ephemeral_low = 0;
  ASSERT_TRUE(range >> ephemeral_low);
  for (int i = 0; i < 20; ++i) {
    const int port = PickFreePort();
    ASSERT_GE(port, kLowestPickedPort);
    EXPECT_LT(port, ephemeral_low);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    ::close(fd);
  }  // Claimed ports are not handed out twice (300 random picks from ~12 000 ports would repeat
  // one more often than not without the claims).
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) EXPECT_TRUE(seen.insert(PickFreePort()).second) << i;
}

}  // namespace
}  // namespace mlcd::worker
