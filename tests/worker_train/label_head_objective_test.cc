// The label heads as training objectives (worker/train/label_head_objective.h) through the
// real TrainStep with a small ViT: two steps at world size 2 (real Gloo groups, one thread
// per rank, the global batch split unevenly) equal to one process holding the whole batch
// (losses, backbone; the head by its summed gradient and the rows' gradients), for bce and for
// mulcon in both of its steps; MulCon's schedule (BCE alone, then BCE + LLCL at
// the smaller learning rate); a checkpoint saved and loaded gives the same head, optimizer
// and step count.
#include "worker/train/label_head_objective.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/testing/process.h"
#include "tests/worker_loss/run_ranks.h"
#include "tests/worker_train/small_vit.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/grad_sync.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

constexpr int64_t kClasses = 5;

LabelHeadObjectiveOptions Options(LabelHeadVariant variant) {
  LabelHeadObjectiveOptions o;
  o.variant = variant;
  o.num_classes = kClasses;
  o.embedding_dim = 24;   // SmallTestVit's embed_dim
  o.head.token_dim = 32;  // its width
  o.head.label_dim = 8;
  o.head.heads = 2;
  o.head.projection_dim = 4;
  o.pretrain_steps = 1;
  o.contrastive_lr_multiplier = 0.5;
  o.seed = 3;
  return o;
}

// One rank: the backbone, its optimizer and gradient sync, the objective, the step.
struct Rank {
  VisionTransformer model{nullptr};
  std::unique_ptr<FlatParameters> flat;
  std::unique_ptr<BackboneAdamW> optimizer;
  std::unique_ptr<GradSync> grad_sync;
  std::unique_ptr<LabelHeadObjective> objective;
  std::unique_ptr<TrainStep> step;

  Rank(Collectives* comm, LabelHeadVariant variant) {
    model = VisionTransformer(SmallTestVit());
    model->ResetParameters(5);
    flat = std::make_unique<FlatParameters>(std::vector<std::vector<torch::Tensor>>{
        model->DecayParameters(), model->NoDecayParameters()});
    optimizer = std::make_unique<BackboneAdamW>(flat.get(), BackboneAdamWOptions{});
    grad_sync = std::make_unique<GradSync>(comm, flat.get());
    auto made = LabelHeadObjective::Create(Options(variant), comm);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    objective = std::move(*made);
    TrainStepParts parts;
    parts.model = model;
    parts.flat = flat.get();
    parts.optimizer = optimizer.get();
    parts.grad_sync = grad_sync.get();
    parts.objective = objective.get();
    step = std::make_unique<TrainStep>(parts, torch::Device(torch::kCPU), Precision::kFp32);
  }
  // One step as the trainer runs it: both learning rates times the objective's multiplier.
  StatusOr<TrainStepResult> Run(const torch::Tensor& x, const torch::Tensor& y) {
    const double m = objective->learning_rate_multiplier();
    return step->Run(x, y, 1e-3 * m, 1e-2 * m);
  }
};

torch::Tensor Images() {
  torch::manual_seed(7);
  return torch::randn({5, 1, 28, 28});
}

// Padding, a repeated label, a label one image carries, an image without labels.
torch::Tensor Labels() {
  return torch::tensor({0, 1, -1, 1, 1, -1, 4, 0, 2, -1, -1, -1, 2, 0, -1}, torch::kLong)
      .view({5, 3});
}

torch::Tensor HeadVector(const LabelHeadObjective& o) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : o.Parameters()) flat.push_back(p.detach().reshape(-1));
  return torch::cat(flat);
}

// Fixed backbone outputs for the whole batch, drawn from a generator of their own: the ranks
// run as threads, and the global generator is shared between them.
BackboneOutput FixedBackboneOutput() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(2);
  BackboneOutput all;
  all.embeddings = at::randn({5, 24}, gen);
  all.patch_tokens = at::randn({5, 16, 32}, gen);
  return all;
}

// The head's gradients summed over the ranks after one ForwardBackward on rows [b, b + n) of
// `all` (mulcon in its contrastive step from the start), then the gradient of those rows (the
// embeddings' for bce, the patch tokens' for mulcon).
std::vector<torch::Tensor> HeadGradients(Collectives* comm, LabelHeadVariant variant,
                                         const BackboneOutput& all, int64_t b, int64_t n) {
  LabelHeadObjectiveOptions o = Options(variant);
  o.pretrain_steps = 0;
  auto objective = LabelHeadObjective::Create(o, comm);
  EXPECT_TRUE(objective.ok());
  BackboneOutput mine;
  mine.embeddings = all.embeddings.narrow(0, b, n);
  mine.patch_tokens = all.patch_tokens.narrow(0, b, n);
  auto step = (*objective)->ForwardBackward(mine, Labels().narrow(0, b, n));
  EXPECT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_TRUE((*objective)->AllReduceGradients().ok());
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : (*objective)->Parameters()) grads.push_back(p.grad().reshape(-1));
  grads.push_back(variant == LabelHeadVariant::kBce ? step->grad_embeddings.reshape(-1)
                                                    : step->grad_patch_tokens.reshape(-1));
  return grads;
}

TEST(LabelHeadObjectiveTest, TwoRanksEqualOneProcessInEveryStep) {
  for (LabelHeadVariant variant : {LabelHeadVariant::kBce, LabelHeadVariant::kMulCon}) {
    SCOPED_TRACE(LabelHeadVariantName(variant));
    const torch::Tensor x = Images(), y = Labels();
    const BackboneOutput outputs = FixedBackboneOutput();
    auto local = Collectives::Local();
    Rank one(local.get(), variant);
    std::vector<double> one_losses;
    for (int s = 0; s < 2; ++s) {
      auto r = one.Run(x, y);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      one_losses.push_back(r->objective.loss);
    }
    const std::vector<int64_t> begin = {0, 2, 5};  // 2 and 3 images
    std::mutex mu;
    std::vector<std::vector<double>> losses(2);
    std::vector<torch::Tensor> backbones(2);
    std::vector<std::vector<torch::Tensor>> grads(2);
    RunRanks(2, [&](int rank, Collectives& comm) {
      Rank mine(&comm, variant);
      const int64_t b = begin[static_cast<size_t>(rank)];
      const int64_t n = begin[static_cast<size_t>(rank) + 1] - b;
      for (int s = 0; s < 2; ++s) {
        auto r = mine.Run(x.narrow(0, b, n), y.narrow(0, b, n));
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        std::lock_guard<std::mutex> lock(mu);
        losses[static_cast<size_t>(rank)].push_back(r->objective.loss);
      }
      std::vector<torch::Tensor> g = HeadGradients(&comm, variant, outputs, b, n);
      std::lock_guard<std::mutex> lock(mu);
      grads[static_cast<size_t>(rank)] = std::move(g);
      backbones[static_cast<size_t>(rank)] = mine.flat->values().clone();
    });
    if (HasFailure()) return;
    const std::vector<torch::Tensor> one_grads = HeadGradients(local.get(), variant, outputs, 0, 5);
    for (int r = 0; r < 2; ++r) {
      for (size_t s = 0; s < 2; ++s)
        EXPECT_NEAR(losses[static_cast<size_t>(r)][s], one_losses[s], 1e-5) << "step " << s;
      // AdamW divides each gradient by its own scale, so a gradient that is zero up to rounding
      // (a key bias: the softmax ignores it) moves its parameter by about lr either way; the
      // head is compared by its summed gradient before any step instead.
      const std::vector<torch::Tensor>& mine = grads[static_cast<size_t>(r)];
      ASSERT_EQ(mine.size(), one_grads.size());
      for (size_t i = 0; i + 1 < mine.size(); ++i) {
        const double scale = std::max(one_grads[i].abs().max().item<double>(), 1e-3);
        EXPECT_LE((mine[i] - one_grads[i]).abs().max().item<double>(), 1e-5 * scale)
            << "parameter " << i;
      }
      const int64_t b = begin[static_cast<size_t>(r)], n = begin[static_cast<size_t>(r) + 1] - b;
      const torch::Tensor rows = one_grads.back().view({5, -1}).narrow(0, b, n).reshape(-1);
      EXPECT_LE((mine.back() - rows).abs().max().item<double>(),
                1e-5 * std::max(rows.abs().max().item<double>(), 1e-3));
      EXPECT_LT((backbones[static_cast<size_t>(r)] - one.flat->values()).abs().max().item<double>(),
                1e-5);
    }
  }
}

TEST(LabelHeadObjectiveTest, MulconPretrainsWithBceThenAddsTheContrastiveLoss) {
  auto comm = Collectives::Local();
  Rank rank(comm.get(), LabelHeadVariant::kMulCon);
  EXPECT_TRUE(rank.objective->needs().patch_tokens);
  EXPECT_FALSE(rank.objective->contrastive());
  EXPECT_EQ(rank.objective->learning_rate_multiplier(), 1.0);
  auto extra = [](const TrainStepResult& r, const std::string& name) {
    for (const auto& [key, value] : r.objective.stats.extra)
      if (key == name) return value;
    return -1.0;
  };
  auto first = rank.Run(Images(), Labels());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(extra(*first, "llcl_loss"), 0.0);
  EXPECT_DOUBLE_EQ(first->objective.loss, extra(*first, "bce_loss"));
  EXPECT_TRUE(rank.objective->contrastive());
  EXPECT_EQ(rank.objective->learning_rate_multiplier(), 0.5);
  auto second = rank.Run(Images(), Labels());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GT(extra(*second, "llcl_loss"), 0.0);
  EXPECT_NEAR(second->objective.loss,
              extra(*second, "bce_loss") + 0.1 * extra(*second, "llcl_loss"), 1e-9);
  // Active label-level embeddings: 2 + 1 + 3 + 0 + 2.
  EXPECT_EQ(extra(*second, "active_label_embeddings"), 8.0);
}

TEST(LabelHeadObjectiveTest, ACheckpointRestoresHeadOptimizerAndStep) {
  for (LabelHeadVariant variant : {LabelHeadVariant::kBce, LabelHeadVariant::kMulCon}) {
    SCOPED_TRACE(LabelHeadVariantName(variant));
    auto comm = Collectives::Local();
    Rank a(comm.get(), variant);
    ASSERT_TRUE(a.Run(Images(), Labels()).ok());
    testing::TempDir dir;
    ASSERT_TRUE(a.objective->Save(dir.path()).ok());
    auto b = LabelHeadObjective::Create(Options(variant), comm.get());
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->Load(dir.path()).ok());
    EXPECT_EQ((*b)->step_count(), 1);
    EXPECT_TRUE(torch::equal(HeadVector(**b), HeadVector(*a.objective)));
    // The same next step from the restored state: same optimizer moments.
    BackboneOutput out;
    torch::manual_seed(1);
    out.embeddings = torch::randn({5, 24});
    out.patch_tokens = torch::randn({5, 16, 32});
    for (LabelHeadObjective* o : {a.objective.get(), b->get()}) {
      ASSERT_TRUE(o->ForwardBackward(out, Labels()).ok());
      ASSERT_TRUE(o->AllReduceGradients().ok());
      ASSERT_TRUE(o->OptimizerStep(1e-2).ok());
    }
    EXPECT_TRUE(torch::allclose(HeadVector(**b), HeadVector(*a.objective), 0, 1e-7));
    EXPECT_FALSE((*b)->OptimizerStep(1e-2).ok());  // no pending gradient
  }
}

}  // namespace
}  // namespace mlcd::worker
