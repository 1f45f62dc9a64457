// GradSync over real Gloo groups (three ranks, one thread each): the overlapped sync (the
// backward's hooks start buckets as their gradients are written) gives exactly the sums of the
// blocking sync and of a by-hand sum of every rank's gradient; the backward does start
// buckets; a backward that was not armed starts none; every launch order is the same on
// every rank whatever the forward positions say.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <vector>

#include "tests/worker_loss/run_ranks.h"
#include "tests/worker_train/small_vit.h"
#include "worker/model/vit.h"
#include "worker/train/grad_sync.h"

namespace mlcd::worker {
namespace {

constexpr int kRanks = 3;

// One rank's model with its flat buffers, the same weights on every rank.
struct Replica {
  VisionTransformer model{nullptr};
  std::unique_ptr<FlatParameters> flat;
  Replica() {
    model = VisionTransformer(SmallTestVit());
    model->ResetParameters(11);
    flat = std::make_unique<FlatParameters>(std::vector<std::vector<torch::Tensor>>{
        model->DecayParameters(), model->NoDecayParameters()});
  }
  // This rank's loss and backward: its own images (a generator of its own: the ranks are
  // threads of one process).
  void Backward(int rank) {
    at::Generator gen = at::detail::createCPUGenerator(100 + rank);
    torch::Tensor x = at::rand({4, 1, 28, 28}, gen);
    model->forward(x).pow(2).sum().backward();
  }
};

// Local gradients of every rank, summed by hand.
torch::Tensor SumByHand() {
  torch::Tensor sum;
  for (int r = 0; r < kRanks; ++r) {
    Replica one;
    one.flat->ZeroGrad();
    one.Backward(r);
    sum = r == 0 ? one.flat->grads().clone() : sum + one.flat->grads();
  }
  return sum;
}

TEST(GradSyncTest, OverlappedSyncEqualsBlockingSyncAndTheSumByHand) {
  const torch::Tensor want = SumByHand();
  std::mutex mu;
  std::vector<torch::Tensor> overlapped(kRanks), blocking(kRanks);
  std::vector<int> started(kRanks, 0), buckets(kRanks, 0);
  RunRanks(kRanks, [&](int rank, Collectives& comm) {
    Replica a, b;
    GradSyncOptions small;
    small.bucket_bytes = 4096;  // many buckets
    small.forward_position = ForwardPositions(*a.model, *a.flat);
    GradSync overlap(&comm, a.flat.get(), small);
    GradSyncOptions off = small;
    off.overlap = false;
    GradSync plain(&comm, b.flat.get(), off);
    for (int step = 0; step < 2; ++step) {  // the hooks serve every step
      a.flat->ZeroGrad();
      overlap.BeginBackward();
      a.Backward(rank);
      ASSERT_TRUE(overlap.AllReduceGradients().ok());
    }
    b.flat->ZeroGrad();
    b.Backward(rank);
    ASSERT_TRUE(plain.AllReduceGradients().ok());
    std::lock_guard<std::mutex> lock(mu);
    overlapped[rank] = a.flat->grads().clone();
    blocking[rank] = b.flat->grads().clone();
    started[rank] = overlap.started_during_backward();
    buckets[rank] = overlap.num_buckets();
  });
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(overlapped[r].defined());
    EXPECT_GT(buckets[r], 4);
    EXPECT_GT(started[r], 0) << "the backward started no bucket";
    EXPECT_TRUE(torch::equal(overlapped[r], blocking[r]));
    EXPECT_TRUE(torch::allclose(overlapped[r], want, 1e-5, 1e-6));
  }
}

// Forward positions that disagree with the real order (here: reversed) cost only the overlap:
// the launch order is still one order on every rank, and the sums are right.
TEST(GradSyncTest, AnyForwardPositionsGiveTheSameSums) {
  const torch::Tensor want = SumByHand();
  std::mutex mu;
  std::vector<torch::Tensor> got(kRanks);
  RunRanks(kRanks, [&](int rank, Collectives& comm) {
    Replica a;
    GradSyncOptions options;
    options.bucket_bytes = 4096;
    std::vector<int64_t> reversed = ForwardPositions(*a.model, *a.flat);
    for (int64_t& p : reversed) p = -p;
    options.forward_position = reversed;
    GradSync sync(&comm, a.flat.get(), options);
    a.flat->ZeroGrad();
    sync.BeginBackward();
    a.Backward(rank);
    ASSERT_TRUE(sync.AllReduceGradients().ok());
    std::lock_guard<std::mutex> lock(mu);
    got[rank] = a.flat->grads().clone();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(torch::allclose(got[r], want, 1e-5, 1e-6)) << r;
}

TEST(GradSyncTest, AnUnarmedBackwardStartsNothing) {
  RunRanks(2, [&](int rank, Collectives& comm) {
    Replica a;
    GradSyncOptions options;
    options.bucket_bytes = 4096;
    GradSync sync(&comm, a.flat.get(), options);
    a.flat->ZeroGrad();
    a.Backward(rank);  // no BeginBackward
    ASSERT_TRUE(sync.AllReduceGradients().ok());
    EXPECT_EQ(sync.started_during_backward(), 0);
  });
}

}  // namespace
}  // namespace mlcd::worker
