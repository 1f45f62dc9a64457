// The device layer (PartialFcLayer::kDevice, worker/loss/partial_fc_device.cc) on CPU tensors
// against the fused host layer: the same sampled sets, losses, embedding gradients, centres,
// moments and row steps after the optimizer, at 1 and 3 ranks over real Gloo groups, for
// MLCD, MLC and softmax, with padded labels and positives on other ranks' shards; bad labels
// refused on every rank; checkpoints interchanged both ways; a resharded resume (3 -> 2
// ranks) through the device layer; with a GPU (skipped otherwise) the CUDA layer equals the
// CPU layer over 2 steps. (The double-precision reference and finite differences for both
// layers: partial_fc_test.cc; given sampled sets over real processes: loss_check_test.cc.)
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "tests/testing/process.h"
#include "tests/worker_loss/run_ranks.h"
#include "worker/loss/partial_fc.h"

namespace mlcd::worker {
namespace {

constexpr double kTolerance = 1e-5;

at::Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kFloat);
}

// A global batch of 9 over 31 classes, l = 3 with padding (-1) and a duplicate; r = 0.3, so
// the sampled sets are real draws (the same in both layers).
struct Case {
  int64_t B = 9, D = 8, K = 31;
  at::Tensor E = Randn({9, 8}, 5);
  at::Tensor Y =
      at::tensor(std::vector<int64_t>{0,  30, 7,  12, -1, -1, 3,  3,  20, 29, 1,  -1, 15, 16,
                                      17, 8,  -1, 25, 4,  11, 22, 19, -1, -1, 30, 0,  6},
                 at::kLong)
          .view({9, 3});
  LossVariant variant = LossVariant::kMlcd;
  double sample_ratio = 0.3;
  PartialFcOptions Options(PartialFcLayer layer) const {
    PartialFcOptions o;
    o.num_classes = K;
    o.embedding_dim = D;
    o.variant = variant;
    o.scale = 16;
    o.margin = 0.3;
    o.sample_ratio = sample_ratio;
    o.weight_decay = 0.05;
    o.seed = 3;
    o.layer = layer;
    return o;
  }
  int64_t Begin(int world, int rank) const { return (B * rank) / world; }
};

// Everything a run leaves, gathered into global tensors.
struct LayerRun {
  std::vector<double> losses;
  at::Tensor grad_embeddings;    // [B, D] of the last step
  std::vector<int64_t> sampled;  // global ids sampled in the last step, all ranks, sorted
  at::Tensor weight, exp_avg, exp_avg_sq, row_steps;  // after the last step
};

struct RunPlan {
  PartialFcLayer layer = PartialFcLayer::kHost;
  int world = 1;
  int steps = 2;
  std::string load_dir, save_dir;
};

LayerRun Train(const Case& tc, const RunPlan& plan) {
  LayerRun out;
  out.losses.assign(plan.steps, 0);
  out.grad_embeddings = at::zeros({tc.B, tc.D});
  out.weight = at::zeros({tc.K, tc.D});
  out.exp_avg = at::zeros({tc.K, tc.D});
  out.exp_avg_sq = at::zeros({tc.K, tc.D});
  out.row_steps = at::zeros({tc.K}, at::kLong);
  std::mutex mu;
  RunRanks(plan.world, [&](int rank, Collectives& comm) {
    auto pfc = PartialFc::Create(tc.Options(plan.layer), &comm);
    ASSERT_TRUE(pfc.ok()) << pfc.status().ToString();
    if (!plan.load_dir.empty()) {
      Status s = (*pfc)->Load(plan.load_dir);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    const int64_t b0 = tc.Begin(plan.world, rank), b1 = tc.Begin(plan.world, rank + 1);
    for (int step = 0; step < plan.steps; ++step) {
      at::Tensor E = tc.E.roll({(*pfc)->step()}, {0});  // another batch each step
      auto r = (*pfc)->ForwardBackward(E.narrow(0, b0, b1 - b0), tc.Y.narrow(0, b0, b1 - b0));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::lock_guard<std::mutex> lock(mu);
      if (rank == 0) out.losses[step] = r->loss;
      if (step + 1 == plan.steps) {
        out.grad_embeddings.narrow(0, b0, b1 - b0).copy_(r->grad_embeddings);
        at::Tensor ids = (*pfc)->last_sampled_classes().cpu();
        for (int64_t q = 0; q < ids.numel(); ++q) out.sampled.push_back(ids[q].item<int64_t>());
      }
      ASSERT_TRUE((*pfc)->OptimizerStep(0.01).ok());
    }
    const ClassRange range = (*pfc)->class_range();
    const PartialFcShardState st = (*pfc)->ExportState();
    {
      std::lock_guard<std::mutex> lock(mu);
      out.weight.narrow(0, range.begin, range.size()).copy_(st.weight);
      out.exp_avg.narrow(0, range.begin, range.size()).copy_(st.exp_avg);
      out.exp_avg_sq.narrow(0, range.begin, range.size()).copy_(st.exp_avg_sq);
      out.row_steps.narrow(0, range.begin, range.size()).copy_(st.row_steps);
    }
    if (!plan.save_dir.empty()) {
      Status s = (*pfc)->Save(plan.save_dir);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  });
  std::sort(out.sampled.begin(), out.sampled.end());
  return out;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Within kTolerance (relative to the larger magnitude, at least 1).
void ExpectSameRun(const LayerRun& want, const LayerRun& got) {
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], kTolerance * std::max(1.0, want.losses[s]))
        << "step " << s;
  }
  EXPECT_EQ(got.sampled, want.sampled) << "the sampled sets differ";
  auto scale = [](const at::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); };
  EXPECT_LE(MaxDiff(got.grad_embeddings, want.grad_embeddings),
            kTolerance * scale(want.grad_embeddings));
  EXPECT_LE(MaxDiff(got.weight, want.weight), kTolerance * scale(want.weight));
  EXPECT_LE(MaxDiff(got.exp_avg, want.exp_avg), kTolerance * scale(want.exp_avg));
  EXPECT_LE(MaxDiff(got.exp_avg_sq, want.exp_avg_sq), kTolerance * scale(want.exp_avg_sq));
  EXPECT_TRUE(got.row_steps.equal(want.row_steps));
}

class DeviceLayerVariantTest : public ::testing::TestWithParam<LossVariant> {};

TEST_P(DeviceLayerVariantTest, EqualsTheHostLayerAtOneAndThreeRanks) {
  Case tc;
  tc.variant = GetParam();
  for (int world : {1, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    LayerRun host = Train(tc, {PartialFcLayer::kHost, world, 2, "", ""});
    LayerRun device = Train(tc, {PartialFcLayer::kDevice, world, 2, "", ""});
    EXPECT_GT(host.grad_embeddings.abs().max().item<double>(), 1e-4);  // not vacuous
    EXPECT_GT(host.row_steps.sum().item<int64_t>(), 0);
    EXPECT_LT(static_cast<int64_t>(host.sampled.size()), tc.K);  // a real draw
    ExpectSameRun(host, device);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DeviceLayerVariantTest,
                         ::testing::Values(LossVariant::kMlcd, LossVariant::kMlc,
                                           LossVariant::kSoftmax),
                         [](const ::testing::TestParamInfo<LossVariant>& info) {
                           return std::string(LossVariantName(info.param));
                         });

TEST(DeviceLayerTest, LabelOutsideTheClassesIsRefusedOnEveryRank) {
  Case tc;
  at::Tensor Y = tc.Y.clone();
  Y[7][1] = tc.K;  // on rank 2 of 3
  std::mutex mu;
  std::vector<std::string> messages(3);
  RunRanks(3, [&](int rank, Collectives& comm) {
    auto pfc = PartialFc::Create(tc.Options(PartialFcLayer::kDevice), &comm);
    ASSERT_TRUE(pfc.ok());
    const int64_t b0 = tc.Begin(3, rank), b1 = tc.Begin(3, rank + 1);
    auto r = (*pfc)->ForwardBackward(tc.E.narrow(0, b0, b1 - b0), Y.narrow(0, b0, b1 - b0));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE((*pfc)->has_pending_gradient());
    std::lock_guard<std::mutex> lock(mu);
    messages[rank] = r.status().message();
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("label 31"), std::string::npos) << m;
    EXPECT_NE(m.find("on rank 2"), std::string::npos) << m;
  }
}

TEST(DeviceLayerTest, EmbeddingsOnAnotherDeviceOrDtypeAreRefused) {
  Case tc;
  auto comm = Collectives::Local();
  auto pfc = PartialFc::Create(tc.Options(PartialFcLayer::kDevice), comm.get());
  ASSERT_TRUE(pfc.ok());
  auto r = (*pfc)->ForwardBackward(tc.E.to(at::kDouble), tc.Y);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("float32"), std::string::npos) << r.status().message();
  PartialFcOptions host_on_gpu = tc.Options(PartialFcLayer::kHost);
  host_on_gpu.device = c10::Device(c10::kCUDA, 0);
  auto bad = PartialFc::Create(host_on_gpu, comm.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layer device"), std::string::npos)
      << bad.status().message();
}

// OptimizerStep with `apply` (TrainStep's check of the backbone's gradient): true gives the
// unmasked update exactly, false leaves weights, moments, row steps and the step count as
// they were and drops the gradient. The device layer masks on the device; the host layer
// reads the flag.
TEST(DeviceLayerTest, MaskedUpdateAppliesOrLeavesEverythingAsItWas) {
  Case tc;
  for (PartialFcLayer layer : {PartialFcLayer::kDevice, PartialFcLayer::kHost}) {
    SCOPED_TRACE(PartialFcLayerName(layer));
    auto comm = Collectives::Local();
    auto plain = PartialFc::Create(tc.Options(layer), comm.get());
    auto masked = PartialFc::Create(tc.Options(layer), comm.get());
    ASSERT_TRUE(plain.ok() && masked.ok());
    const at::Tensor yes = at::ones({}, at::kBool), no = at::zeros({}, at::kBool);
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE((*plain)->ForwardBackward(tc.E, tc.Y).ok());
      ASSERT_TRUE((*masked)->ForwardBackward(tc.E, tc.Y).ok());
      ASSERT_TRUE((*plain)->OptimizerStep(0.01).ok());
      ASSERT_TRUE((*masked)->OptimizerStep(0.01, yes).ok());
    }
    const PartialFcShardState a = (*plain)->ExportState(), b = (*masked)->ExportState();
    EXPECT_TRUE(at::equal(a.weight, b.weight));
    EXPECT_TRUE(at::equal(a.exp_avg, b.exp_avg));
    EXPECT_TRUE(at::equal(a.exp_avg_sq, b.exp_avg_sq));
    EXPECT_TRUE(at::equal(a.row_steps, b.row_steps));
    EXPECT_EQ(b.step, 2);
    EXPECT_EQ((*masked)->step(), 2);

    ASSERT_TRUE((*masked)->ForwardBackward(tc.E, tc.Y).ok());
    const at::Tensor weight = b.weight.clone(), m = b.exp_avg.clone(), v = b.exp_avg_sq.clone(),
                     rows = b.row_steps.clone();
    ASSERT_TRUE((*masked)->OptimizerStep(0.01, no).ok());
    const PartialFcShardState c = (*masked)->ExportState();
    EXPECT_TRUE(at::equal(c.weight, weight));
    EXPECT_TRUE(at::equal(c.exp_avg, m));
    EXPECT_TRUE(at::equal(c.exp_avg_sq, v));
    EXPECT_TRUE(at::equal(c.row_steps, rows));
    EXPECT_EQ((*masked)->step(), 2);
    EXPECT_FALSE((*masked)->has_pending_gradient());
  }
}

// A checkpoint written by either layer resumes in the other: 2 + 2 steps equal 4 straight.
TEST(DeviceLayerCheckpointTest, InterchangeBothWays) {
  Case tc;
  const LayerRun straight = Train(tc, {PartialFcLayer::kHost, 3, 4, "", ""});
  for (PartialFcLayer first : {PartialFcLayer::kHost, PartialFcLayer::kDevice}) {
    const PartialFcLayer second =
        first == PartialFcLayer::kHost ? PartialFcLayer::kDevice : PartialFcLayer::kHost;
    SCOPED_TRACE(std::string(PartialFcLayerName(first)) + " -> " + PartialFcLayerName(second));
    testing::TempDir dir;
    LayerRun a = Train(tc, {first, 3, 2, "", dir.path()});
    LayerRun b = Train(tc, {second, 3, 2, dir.path(), ""});
    EXPECT_NEAR(a.losses[1], straight.losses[1], kTolerance * straight.losses[1]);
    EXPECT_NEAR(b.losses[0], straight.losses[2], kTolerance * straight.losses[2]);
    LayerRun tail = straight;
    tail.losses = {straight.losses[2], straight.losses[3]};
    ExpectSameRun(tail, b);
  }
}

// Saved at 3 ranks, resumed at 2, all through the device layer; r = 1 (every class sampled,
// so the draw does not depend on the shards) makes it equal one rank trained straight.
TEST(DeviceLayerCheckpointTest, ReshardedResumeThreeToTwo) {
  Case tc;
  tc.sample_ratio = 1.0;
  const LayerRun straight = Train(tc, {PartialFcLayer::kDevice, 1, 4, "", ""});
  testing::TempDir dir;
  Train(tc, {PartialFcLayer::kDevice, 3, 2, "", dir.path()});
  LayerRun resumed = Train(tc, {PartialFcLayer::kDevice, 2, 2, dir.path(), ""});
  LayerRun tail = straight;
  tail.losses = {straight.losses[2], straight.losses[3]};
  ExpectSameRun(tail, resumed);
}

// With a GPU (skipped otherwise): the device layer on CUDA equals it on the CPU over 2 steps
// (float32 GEMMs; TF32 off).
TEST(DeviceLayerCudaTest, CudaLayerEqualsCpuLayerOverTwoSteps) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setAllowTF32CuBLAS(false);
  Case tc;
  const c10::Device cuda(c10::kCUDA, 0);
  auto comm = Collectives::Local(cuda);
  auto cpu_comm = Collectives::Local();
  PartialFcOptions on_gpu = tc.Options(PartialFcLayer::kDevice);
  on_gpu.device = cuda;
  auto gpu = PartialFc::Create(on_gpu, comm.get());
  auto cpu = PartialFc::Create(tc.Options(PartialFcLayer::kDevice), cpu_comm.get());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE((*gpu)->weight().is_cuda());
  for (int step = 0; step < 2; ++step) {
    at::Tensor E = tc.E.roll({step}, {0});
    auto a = (*gpu)->ForwardBackward(E.to(cuda), tc.Y);
    auto b = (*cpu)->ForwardBackward(E, tc.Y);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(a->grad_embeddings.is_cuda());
    EXPECT_NEAR(a->loss, b->loss, kTolerance * b->loss) << "step " << step;
    EXPECT_LE(MaxDiff(a->grad_embeddings.cpu(), b->grad_embeddings), kTolerance);
    EXPECT_TRUE((*gpu)->last_sampled_classes().cpu().equal((*cpu)->last_sampled_classes()));
    ASSERT_TRUE((*gpu)->OptimizerStep(0.01).ok());
    ASSERT_TRUE((*cpu)->OptimizerStep(0.01).ok());
  }
  const PartialFcShardState g = (*gpu)->ExportState(), c = (*cpu)->ExportState();
  EXPECT_LE(MaxDiff(g.weight.cpu(), c.weight), kTolerance);
  EXPECT_LE(MaxDiff(g.exp_avg.cpu(), c.exp_avg), kTolerance);
  EXPECT_LE(MaxDiff(g.exp_avg_sq.cpu(), c.exp_avg_sq), kTolerance);
  EXPECT_TRUE(g.row_steps.cpu().equal(c.row_steps));
}

}  // namespace
}  // namespace mlcd::worker
