// The backbone's AdamW over flat parameters (worker/train/backbone_optimizer.h): each kernel
// against torch::optim::AdamW, clipping and the gradient scale by hand, the two-half step
// TrainStep runs (StepOnDevice + Settle) against CheckedStep, and the kernel choice.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/torch_compat.h"
#include "worker/train/backbone_optimizer.h"

namespace mlcd::worker {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// BackboneAdamW with `kernel` against torch::optim::AdamW over five steps, two groups with
// their own weight decay; then its clipping factor and gradient scale by hand.
void ExpectAdamWMatchesTorch(AdamWKernel kernel) {
  torch::manual_seed(1);
  torch::Tensor w1 = torch::randn({5, 4}), b1 = torch::randn({4});
  torch::Tensor w2 = w1.clone().requires_grad_(true), b2 = b1.clone().requires_grad_(true);
  w1.requires_grad_(true);
  b1.requires_grad_(true);
  FlatParameters flat({{w1}, {b1}});
  EXPECT_EQ(w1.data_ptr<float>(), flat.values().data_ptr<float>());
  EXPECT_TRUE(torch::equal(w1, w2));
  BackboneAdamWOptions opts;
  opts.beta1 = 0.9;
  opts.beta2 = 0.98;
  opts.eps = 1e-6;
  opts.weight_decay = {0.2, 0.0};
  opts.grad_clip_norm = -1;
  opts.kernel = kernel;
  ASSERT_EQ(ChosenAdamWKernel(kernel, torch::kCPU), kernel);
  BackboneAdamW mine(&flat, opts);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<torch::Tensor>{w2},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.98}).eps(1e-6).weight_decay(0.2)));
  groups.emplace_back(
      std::vector<torch::Tensor>{b2},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.98}).eps(1e-6).weight_decay(0.0)));
  torch::optim::AdamW theirs(groups, torch::optim::AdamWOptions(0.01));
  torch::Tensor x = torch::randn({3, 5});
  for (int step = 0; step < 5; ++step) {
    flat.ZeroGrad();
    (torch::tanh(x.matmul(w1) + b1)).pow(2).sum().backward();
    mine.Step(0.01);
    theirs.zero_grad();
    (torch::tanh(x.matmul(w2) + b2)).pow(2).sum().backward();
    theirs.step();
  }
  EXPECT_LT(MaxAbsDiff(w1, w2), 1e-6);
  EXPECT_LT(MaxAbsDiff(b1, b2), 1e-6);
  EXPECT_EQ(mine.step_count(), 5);

  // Clipping: a gradient of norm 10 clipped to 1 moves the first Adam step like one of norm 1
  // (Adam's first step is sign-like, so compare the reported statistics).
  flat.ZeroGrad();
  flat.grads().fill_(0);
  flat.grads()[0] = 6;
  flat.grads()[1] = 8;
  BackboneAdamWOptions clip = opts;
  clip.grad_clip_norm = 1.0;
  BackboneAdamW clipped(&flat, clip);
  BackboneStepStats s = clipped.Step(0.0, 0.5);
  EXPECT_NEAR(s.grad_norm, 5.0, 1e-9);
  EXPECT_NEAR(s.clip_coef, 1.0 / 5.0, 1e-6);
  EXPECT_NEAR(clipped.exp_avg()[1].item<double>(), 0.1 * 8 * 0.5 / 5.0, 1e-6);
}

// StepOnDevice + Settle (what TrainStep runs) against CheckedStep with `kernel`: the same
// parameters, moments, step count and figures over three steps, clipped and not; then a
// non-finite gradient: `apply` is false, Settle refuses the step with INVALID_ARGUMENT, and no
// parameter, moment or step count changed; a bad learning rate queues nothing.
void ExpectSettledStepMatchesCheckedStep(AdamWKernel kernel) {
  torch::manual_seed(2);
  torch::Tensor wa = torch::randn({6, 5}).requires_grad_(true),
                ba = torch::randn({5}).requires_grad_(true);
  torch::Tensor wb = wa.detach().clone().requires_grad_(true),
                bb = ba.detach().clone().requires_grad_(true);
  FlatParameters fa({{wa}, {ba}}), fb({{wb}, {bb}});
  BackboneAdamWOptions opts;
  opts.weight_decay = {0.1, 0.0};
  opts.grad_clip_norm = 2.0;
  opts.kernel = kernel;
  ASSERT_EQ(ChosenAdamWKernel(kernel, torch::kCPU), kernel);
  BackboneAdamW checked(&fa, opts), settled(&fb, opts);
  for (int step = 0; step < 3; ++step) {
    // Global norms after the 0.5 scale of about 1.4, 2.7 and 4.1: clipped from the second on.
    const torch::Tensor g = torch::randn({fa.numel()}) * static_cast<double>(step + 1) / 2.0;
    fa.grads().copy_(g);
    fb.grads().copy_(g);
    auto a = checked.CheckedStep(0.01, 0.5);
    auto pending = settled.StepOnDevice(0.01, 0.5);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    EXPECT_TRUE(pending->apply.item<bool>());
    auto b = settled.Settle(*pending);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_NEAR(b->grad_norm, a->grad_norm, 1e-5 * a->grad_norm) << "step " << step;
    EXPECT_NEAR(b->clip_coef, a->clip_coef, 1e-5) << "step " << step;
    EXPECT_LT(MaxAbsDiff(fb.values(), fa.values()), 1e-6) << "step " << step;
    EXPECT_LT(MaxAbsDiff(settled.exp_avg(), checked.exp_avg()), 1e-6) << "step " << step;
    EXPECT_LT(MaxAbsDiff(settled.exp_avg_sq(), checked.exp_avg_sq()), 1e-7) << "step " << step;
    EXPECT_EQ(settled.step_count(), step + 1);
  }
  EXPECT_EQ(checked.step_count(), 3);
  const torch::Tensor values = fb.values().clone(), m = settled.exp_avg().clone(),
                      v = settled.exp_avg_sq().clone();
  fb.grads().normal_();
  fb.grads()[4] = std::nan("");
  auto pending = settled.StepOnDevice(0.01, 0.5);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_FALSE(pending->apply.item<bool>());
  auto refused = settled.Settle(*pending);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("non-finite"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(torch::equal(fb.values(), values));
  EXPECT_TRUE(torch::equal(settled.exp_avg(), m));
  EXPECT_TRUE(torch::equal(settled.exp_avg_sq(), v));
  EXPECT_EQ(settled.step_count(), 3);
  EXPECT_EQ(settled.StepOnDevice(-1.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(settled.StepOnDevice(std::nan("")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(torch::equal(fb.values(), values));
}

TEST(BackboneAdamWTest, SettledStepMatchesCheckedStepWithEachKernel) {
  ExpectSettledStepMatchesCheckedStep(AdamWKernel::kLoops);
  ExpectSettledStepMatchesCheckedStep(AdamWKernel::kAtenOps);
  if (compat::HasFusedAdamW(c10::DeviceType::CPU)) {
    ExpectSettledStepMatchesCheckedStep(AdamWKernel::kFused);
  } else {
    std::cout << "[ NOTE ] libtorch " << compat::TorchVersion()
              << " has no CPU at::_fused_adamw_ (2.4+): its case runs in the torch 2.x stage\n";
  }
}

TEST(BackboneAdamWTest, LoopsMatchTorchAdamWAndClipTheGlobalNorm) {
  ExpectAdamWMatchesTorch(AdamWKernel::kLoops);
}

TEST(BackboneAdamWTest, AtenOpsMatchTorchAdamWAndClipTheGlobalNorm) {
  ExpectAdamWMatchesTorch(AdamWKernel::kAtenOps);
}

TEST(BackboneAdamWTest, FusedAdamWMatchesTorchAdamWAndClipsTheGlobalNorm) {
  if (!compat::HasFusedAdamW(c10::DeviceType::CPU))
    GTEST_SKIP() << "libtorch " << compat::TorchVersion()
                 << " has no CPU at::_fused_adamw_ (2.4+); the torch 2.x stage runs this";
  ExpectAdamWMatchesTorch(AdamWKernel::kFused);
}

// kAuto: the fused kernel where the build has it for the device; otherwise our loop on the
// CPU and ATen's operations elsewhere.
TEST(BackboneAdamWTest, KernelChoiceFollowsTheDevice) {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  EXPECT_EQ(ChosenAdamWKernel(AdamWKernel::kAuto, cpu), compat::HasFusedAdamW(c10::DeviceType::CPU)
                                                            ? AdamWKernel::kFused
                                                            : AdamWKernel::kLoops);
  EXPECT_EQ(compat::HasFusedAdamW(c10::DeviceType::CPU),
            TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4));
  EXPECT_EQ(
      ChosenAdamWKernel(AdamWKernel::kAuto, cuda),
      compat::HasFusedAdamW(c10::DeviceType::CUDA) ? AdamWKernel::kFused : AdamWKernel::kAtenOps);
  EXPECT_EQ(ChosenAdamWKernel(AdamWKernel::kLoops, cuda),
            ChosenAdamWKernel(AdamWKernel::kAuto, cuda));
  EXPECT_EQ(ChosenAdamWKernel(AdamWKernel::kAtenOps, cpu), AdamWKernel::kAtenOps);
}

}  // namespace
}  // namespace mlcd::worker
