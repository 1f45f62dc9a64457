// The training step on a device (worker/train/train_step.h) and the libtorch compatibility
// layer (worker/torch_compat.h), on what runs without a GPU: device names, the bf16 precision
// policy under CPU autocast (the dtype of every tensor of the step), the fp32 step equal to the
// hand-written sequence of its parts, scaled_dot_product_attention against the formula, and a
// checkpoint written by one libtorch build read by the other (MLCD_CROSS_BUILD_CHECKPOINT).
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/enums.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/npy.h"
#include "tests/testing/process.h"
#include "tests/worker_train/small_vit.h"
#include "worker/dist/collectives.h"
#include "worker/loss/partial_fc.h"
#include "worker/model/vit.h"
#include "worker/torch_compat.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_index.h"
#include "worker/train/grad_sync.h"
#include "worker/train/image_bytes.h"
#include "worker/train/partial_fc_objective.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// A model, its optimizer, a local gradient sync and a classification layer: one rank.
struct Rig {
  std::unique_ptr<Collectives> comm = Collectives::Local();
  VisionTransformer model{nullptr};
  std::unique_ptr<FlatParameters> flat;
  std::unique_ptr<BackboneAdamW> optimizer;
  std::unique_ptr<GradSync> grad_sync;
  std::unique_ptr<PartialFcObjective> objective;
  PartialFc* fc = nullptr;  // objective's layer

  explicit Rig(uint64_t seed, PartialFcLayer layer = PartialFcLayer::kHost,
               AdamWKernel kernel = AdamWKernel::kAuto) {
    model = VisionTransformer(SmallTestVit());
    model->ResetParameters(seed);
    flat = std::make_unique<FlatParameters>(std::vector<std::vector<torch::Tensor>>{
        model->DecayParameters(), model->NoDecayParameters()});
    BackboneAdamWOptions aopts;
    aopts.weight_decay = {0.05, 0.0};
    aopts.kernel = kernel;
    optimizer = std::make_unique<BackboneAdamW>(flat.get(), aopts);
    grad_sync = std::make_unique<GradSync>(comm.get(), flat.get());
    PartialFcOptions popts;
    popts.layer = layer;
    popts.num_classes = 40;
    popts.embedding_dim = 24;
    popts.sample_ratio = 1.0;
    popts.seed = seed;
    auto made = PartialFcObjective::Create(popts, comm.get());
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    objective = std::move(*made);
    fc = &objective->layer();
  }
  // A checkpoint of this rank after `global_step` steps of a one-step epoch.
  CheckpointState State(const v1::JobSpec& spec, int64_t global_step) {
    CheckpointState state;
    state.meta.steps_per_epoch = 1;
    state.meta.step_in_epoch = 1;
    state.meta.epoch_complete = true;
    state.meta.global_step = global_step;
    state.meta.num_classes = 40;
    state.meta.embedding_dim = 24;
    state.spec = &spec;
    state.model = model;
    state.flat = flat.get();
    state.optimizer = optimizer.get();
    state.objective = objective.get();
    return state;
  }
  TrainStepParts Parts() {
    TrainStepParts p;
    p.model = model;
    p.flat = flat.get();
    p.optimizer = optimizer.get();
    p.grad_sync = grad_sync.get();
    p.objective = objective.get();
    return p;
  }
};

torch::Tensor Images(int64_t n) {
  torch::manual_seed(3);
  return torch::randn({n, 1, 28, 28});
}

torch::Tensor Labels(int64_t n) {
  return torch::arange(2 * n, torch::kInt).remainder(40).view({n, 2});
}

TEST(ResolveDeviceTest, NamesAndErrors) {
  auto cpu = ResolveDevice("cpu", 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_TRUE(cpu->is_cpu());
  auto bad = ResolveDevice("gpu", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cuda:N"), std::string::npos) << bad.status().message();
  if (torch::cuda::is_available()) GTEST_SKIP() << "the rest needs a machine without CUDA";
  auto automatic = ResolveDevice("auto", 3);
  ASSERT_TRUE(automatic.ok());
  EXPECT_TRUE(automatic->is_cpu());
  for (const char* name : {"cuda", "cuda:0", "cuda:x"}) {
    auto cuda = ResolveDevice(name, 0);
    ASSERT_FALSE(cuda.ok()) << name;
    EXPECT_EQ(cuda.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(cuda.status().message().find("CUDA"), std::string::npos) << cuda.status().message();
  }
}

TEST(PrecisionTest, SpecSpellingParsedOnce) {
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.training().precision(), "fp32");
  EXPECT_TRUE(ValidateJobSpec(&spec).ok());
  spec.mutable_training()->set_precision("bf16");
  EXPECT_TRUE(ValidateJobSpec(&spec).ok());
  spec.mutable_training()->set_precision("fp16");
  Status s = ValidateJobSpec(&spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("training.precision"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  spec.mutable_training()->set_precision("bf16-activations");
  EXPECT_TRUE(ValidateJobSpec(&spec).ok());
  EXPECT_EQ(*ParsePrecision("bf16"), Precision::kBf16);
  EXPECT_EQ(*ParsePrecision("bf16-activations"), Precision::kBf16Activations);
  EXPECT_FALSE(UsesBf16(Precision::kFp32));
  EXPECT_TRUE(UsesBf16(Precision::kBf16));
  EXPECT_TRUE(UsesBf16(Precision::kBf16Activations));
  EXPECT_STREQ(PrecisionName(Precision::kFp32), "fp32");
}

TEST(AutocastScopeTest, EnablesAndRestores) {
  EXPECT_FALSE(compat::AutocastEnabled(c10::DeviceType::CPU));
  {
    compat::AutocastScope scope(c10::DeviceType::CPU, torch::kBFloat16, true);
    EXPECT_TRUE(compat::AutocastEnabled(c10::DeviceType::CPU));
    torch::Tensor a = torch::randn({4, 8}), w = torch::randn({3, 8});
    EXPECT_EQ(torch::linear(a, w).scalar_type(), torch::kBFloat16);
    {
      compat::AutocastScope off(c10::DeviceType::CPU, torch::kBFloat16, false);
      EXPECT_TRUE(compat::AutocastEnabled(c10::DeviceType::CPU));
    }
  }
  EXPECT_FALSE(compat::AutocastEnabled(c10::DeviceType::CPU));
  torch::Tensor a = torch::randn({4, 8}), w = torch::randn({3, 8});
  EXPECT_EQ(torch::linear(a, w).scalar_type(), torch::kFloat);
}

TEST(AttentionCompatTest, ScaledDotProductAttentionIsTheFormula) {
  torch::manual_seed(1);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    torch::Tensor q = torch::randn({2, 3, 5, 8}, dtype), k = torch::randn({2, 3, 5, 8}, dtype),
                  v = torch::randn({2, 3, 5, 8}, dtype);
    torch::Tensor want = torch::matmul(
        torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1), v);
    torch::Tensor got = compat::ScaledDotProductAttention(q, k, v);
    EXPECT_EQ(got.scalar_type(), dtype);
    EXPECT_LT(MaxAbsDiff(got, want), dtype == torch::kFloat ? 1e-5 : 1e-12);
  }
  EXPECT_EQ(compat::HasFusedAttention(), TORCH_VERSION_MAJOR >= 2) << compat::TorchVersion();
}

// fp32 on the CPU: TrainStep is exactly the sequence of its parts.
TEST(TrainStepTest, Fp32StepIsTheHandWrittenSequence) {
  Rig a(11), b(11);
  TrainStep step(a.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
  torch::Tensor x = Images(6), y = Labels(6);
  auto r = step.Run(x, y, 1e-3, 2e-3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  b.flat->ZeroGrad();
  torch::Tensor emb = b.model->forward(x);
  auto fc = b.fc->ForwardBackward(emb.detach(), y);
  ASSERT_TRUE(fc.ok());
  emb.backward(fc->grad_embeddings);
  ASSERT_TRUE(b.grad_sync->AllReduceGradients().ok());
  auto pending = b.optimizer->StepOnDevice(1e-3, 1.0);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE(b.objective->MaskedOptimizerStep(2e-3, pending->apply).ok());
  auto stats = b.optimizer->Settle(*pending);
  ASSERT_TRUE(stats.ok());

  EXPECT_EQ(r->objective.loss, fc->loss);
  EXPECT_EQ(r->backbone.grad_norm, stats->grad_norm);
  EXPECT_TRUE(torch::equal(a.flat->values(), b.flat->values()));
  EXPECT_TRUE(torch::equal(a.fc->weight(), b.fc->weight()));
  EXPECT_GT(r->timings.total, 0.0);
  EXPECT_GE(r->timings.total, r->timings.backbone_forward + r->timings.backbone_backward);
}

// Every parameter, optimizer moment and step count of the rank, copied.
std::vector<torch::Tensor> Snapshot(const Rig& r) {
  const PartialFcShardState fc = r.fc->ExportState();
  return {r.flat->values().clone(),
          r.optimizer->exp_avg().clone(),
          r.optimizer->exp_avg_sq().clone(),
          fc.weight.clone(),
          fc.exp_avg.clone(),
          fc.exp_avg_sq.clone(),
          fc.row_steps.clone(),
          torch::tensor({r.optimizer->step_count(), r.fc->step()})};
}

void ExpectUnchanged(const std::vector<torch::Tensor>& before, const Rig& r) {
  const std::vector<torch::Tensor> after = Snapshot(r);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(torch::equal(before[i], after[i])) << "state tensor " << i << " changed";
}

// Images handed over as uint8 pixels are normalised on the step's device with the host's
// arithmetic: the same step, bit for bit, as the float images they stand for. Without a
// normalisation the step refuses them before anything runs.
TEST(TrainStepTest, Uint8ImagesGiveTheFloatImagesStep) {
  Rig a(13), b(13), c(13);
  const PixelNormalisation norm{{0.3f}, {0.2f}};
  TrainStepParts parts = a.Parts();
  parts.pixels = norm;
  TrainStep bytes_step(parts, torch::Device(torch::kCPU), Precision::kFp32);
  TrainStep float_step(b.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
  torch::manual_seed(5);
  torch::Tensor pixels = torch::randint(0, 256, {6, 1, 28, 28}, torch::kLong).to(torch::kUInt8);
  torch::Tensor x = NormaliseImages(pixels, PixelScaleShiftOn(norm, torch::kCPU));
  torch::Tensor y = Labels(6);
  for (int i = 0; i < 2; ++i) {
    auto from_bytes = bytes_step.Run(pixels, y, 1e-3, 2e-3);
    auto from_floats = float_step.Run(x, y, 1e-3, 2e-3);
    ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().ToString();
    ASSERT_TRUE(from_floats.ok());
    EXPECT_EQ(from_bytes->objective.loss, from_floats->objective.loss) << "step " << i;
  }
  EXPECT_TRUE(torch::equal(a.flat->values(), b.flat->values()));

  TrainStep no_norm(c.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
  const std::vector<torch::Tensor> before = Snapshot(c);
  auto refused = no_norm.Run(pixels, y, 1e-3, 2e-3);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("uint8"), std::string::npos);
  ExpectUnchanged(before, c);
}

// A non-finite backbone gradient with a finite loss (one parameter's gradient made NaN by a
// hook in the real backward) is refused before either optimizer applies anything: every
// parameter, moment and step count stays as it was, and no gradient is left pending.
// With each layer and each backbone AdamW kernel of the build: the check on the host (loops,
// ATen operations) and the one on the device that masks both updates (the fused kernel with
// the device layer, the CUDA default).
TEST(TrainStepTest, NonFiniteGradientLeavesEveryParameterAndMomentUnchanged) {
  std::vector<AdamWKernel> kernels = {AdamWKernel::kLoops, AdamWKernel::kAtenOps};
  if (compat::HasFusedAdamW(c10::DeviceType::CPU)) kernels.push_back(AdamWKernel::kFused);
  for (PartialFcLayer layer : {PartialFcLayer::kHost, PartialFcLayer::kDevice}) {
    for (AdamWKernel kernel : kernels) {
      SCOPED_TRACE(std::string(PartialFcLayerName(layer)) + " layer, " + AdamWKernelName(kernel));
      Rig a(31, layer, kernel);
      TrainStep step(a.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
      torch::Tensor x = Images(6), y = Labels(6);
      ASSERT_TRUE(step.Run(x, y, 1e-3, 2e-3).ok());  // moments and row steps are non-zero now
      const std::vector<torch::Tensor> before = Snapshot(a);
      torch::Tensor victim = a.model->parameters().front();
      victim.register_hook([](torch::Tensor g) { return g * std::nan(""); });
      auto r = step.Run(x, y, 1e-3, 2e-3);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("non-finite"), std::string::npos) << r.status().message();
      EXPECT_NE(r.status().message().find("loss"), std::string::npos) << r.status().message();
      ExpectUnchanged(before, a);
      EXPECT_FALSE(a.fc->has_pending_gradient());
      EXPECT_EQ(a.optimizer->step_count(), 1);
      EXPECT_EQ(a.fc->step(), 1);
    }
  }
}

// A learning rate that is not finite and >= 0 is refused before the step runs.
TEST(TrainStepTest, BadLearningRatesChangeNothing) {
  Rig a(41);
  TrainStep step(a.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
  torch::Tensor x = Images(6), y = Labels(6);
  ASSERT_TRUE(step.Run(x, y, 1e-3, 2e-3).ok());
  const std::vector<torch::Tensor> before = Snapshot(a);
  for (const auto& [lr, centre_lr] : std::vector<std::pair<double, double>>{
           {1e-3, -1.0}, {1e-3, std::nan("")}, {-1.0, 1e-3}, {INFINITY, 1e-3}}) {
    auto r = step.Run(x, y, lr, centre_lr);
    ASSERT_FALSE(r.ok()) << lr << " " << centre_lr;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("learning rate"), std::string::npos)
        << r.status().message();
    ExpectUnchanged(before, a);
    EXPECT_FALSE(a.fc->has_pending_gradient());
  }
}

// Both bf16 policies: bf16 runs the backbone's matmuls in bfloat16 under autocast;
// bf16-activations runs the whole backbone in bfloat16 without autocast. Everything the step
// keeps (parameters, gradients, optimizer moments, class centres, the layer's inputs and
// outputs) is float32, and the embeddings, loss and backbone gradient are close to, but not
// the same as, the fp32 step's.
TEST(TrainStepTest, Bf16PoliciesKeepFloat32StateAndFollowTheFp32Step) {
  for (Precision precision : {Precision::kBf16, Precision::kBf16Activations}) {
    SCOPED_TRACE(PrecisionName(precision));
    Rig a(21), b(21);
    TrainStep bf16(a.Parts(), torch::Device(torch::kCPU), precision);
    TrainStep fp32(b.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
    torch::Tensor x = Images(8), y = Labels(8);

    torch::Tensor e16 = bf16.Embed(x), e32 = fp32.Embed(x);
    EXPECT_EQ(e16.scalar_type(), torch::kFloat);
    const double diff = MaxAbsDiff(e16, e32), scale = e32.abs().max().item<double>();
    EXPECT_GT(diff, 0.0) << "the forward did not run in bf16";
    EXPECT_LT(diff, 0.05 * scale) << "bf16 embeddings too far from fp32";
    EXPECT_FALSE(compat::AutocastEnabled(c10::DeviceType::CPU)) << "scope leaked";

    auto r = bf16.Run(x, y, 1e-3, 1e-3);
    auto r32 = fp32.Run(x, y, 1e-3, 1e-3);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r32.ok()) << r32.status().ToString();
    EXPECT_TRUE(std::isfinite(r->objective.loss));
    EXPECT_EQ(r->objective.grad_embeddings.scalar_type(), torch::kFloat);
    EXPECT_TRUE(r->objective.grad_embeddings.device().is_cpu());
    for (const auto& p : a.model->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat);
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
    }
    EXPECT_EQ(a.flat->values().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.flat->grads().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.optimizer->exp_avg().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.optimizer->exp_avg_sq().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.fc->weight().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.fc->ExportState().exp_avg.scalar_type(), torch::kFloat);
    EXPECT_NEAR(r->objective.loss, r32->objective.loss, 0.02 * std::fabs(r32->objective.loss));
    // The backbone's gradient (what the optimizer stepped with) against the fp32 step's.
    const torch::Tensor g16 = a.flat->grads().to(torch::kDouble),
                        g32 = b.flat->grads().to(torch::kDouble);
    ASSERT_GT(g32.norm().item<double>(), 0.0);
    EXPECT_LT(((g16 - g32).norm() / g32.norm()).item<double>(), 0.05);
  }
}

// On a machine with CUDA (the GPU runs of bench/RESULTS.md "GPU step"; skipped elsewhere): the
// fp32 step on the GPU equals the CPU step, and the bf16 step keeps the float32 tensors.
TEST(TrainStepTest, CudaStepMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  Rig gpu(41), cpu(41);
  gpu.model->to(cuda);
  gpu.flat = std::make_unique<FlatParameters>(std::vector<std::vector<torch::Tensor>>{
      gpu.model->DecayParameters(), gpu.model->NoDecayParameters()});
  BackboneAdamWOptions aopts;
  aopts.weight_decay = {0.05, 0.0};
  gpu.optimizer = std::make_unique<BackboneAdamW>(gpu.flat.get(), aopts);
  gpu.grad_sync = std::make_unique<GradSync>(gpu.comm.get(), gpu.flat.get());
  TrainStep on_gpu(gpu.Parts(), cuda, Precision::kFp32);
  TrainStep on_cpu(cpu.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
  torch::Tensor x = Images(8), y = Labels(8);
  for (int i = 0; i < 2; ++i) {
    auto a = on_gpu.Run(PinnedCopy(x, cuda), y, 1e-3, 1e-3);
    auto b = on_cpu.Run(x, y, 1e-3, 1e-3);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok());
    EXPECT_NEAR(a->objective.loss, b->objective.loss, 1e-4 * std::fabs(b->objective.loss))
        << "step " << i;
  }
  EXPECT_TRUE(gpu.flat->values().is_cuda());
  const PixelNormalisation norm{{0.3f}, {0.2f}};
  torch::Tensor pixels = torch::randint(0, 256, {4, 1, 28, 28}, torch::kLong).to(torch::kUInt8);
  EXPECT_TRUE(torch::equal(NormaliseImages(pixels.to(cuda), PixelScaleShiftOn(norm, cuda)).cpu(),
                           NormaliseImages(pixels, PixelScaleShiftOn(norm, torch::kCPU))));
  EXPECT_LT(MaxAbsDiff(gpu.flat->values().cpu(), cpu.flat->values()), 1e-4);
  EXPECT_LT(MaxAbsDiff(gpu.fc->weight(), cpu.fc->weight()), 1e-5);

  for (Precision precision : {Precision::kBf16, Precision::kBf16Activations}) {
    SCOPED_TRACE(PrecisionName(precision));
    TrainStep bf16(gpu.Parts(), cuda, precision);
    torch::Tensor emb = bf16.Embed(x.to(cuda));
    EXPECT_EQ(emb.scalar_type(), torch::kFloat);
    EXPECT_TRUE(emb.is_cuda());
    auto r = bf16.Run(x, y, 1e-3, 1e-3);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(std::isfinite(r->objective.loss));
    EXPECT_EQ(gpu.flat->grads().scalar_type(), torch::kFloat);
    EXPECT_EQ(gpu.optimizer->exp_avg().scalar_type(), torch::kFloat);
    EXPECT_FALSE(compat::AutocastEnabled(c10::DeviceType::CUDA)) << "scope leaked";
  }

  // A checkpoint written from the GPU resumes on the CPU: the same weights and embeddings.
  ::mlcd::testing::TempDir root;
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  auto dir = WriteCheckpoint(root.path(), gpu.State(spec, 3), gpu.comm.get());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  Rig back(99);
  ASSERT_TRUE(LoadBackboneWeights(*dir, back.model).ok());
  ASSERT_TRUE(LoadBackboneOptimizer(*dir, back.model, back.flat.get(), back.optimizer.get()).ok());
  EXPECT_TRUE(torch::equal(back.flat->values(), gpu.flat->values().cpu()));
  EXPECT_TRUE(torch::equal(back.optimizer->exp_avg(), gpu.optimizer->exp_avg().cpu()));
  gpu.model->eval();
  back.model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxAbsDiff(back.model->forward(x), gpu.model->forward(x.to(cuda)).cpu()), 1e-4);
}

// Before: pruning to the newest keep_last deleted the checkpoint the gang had resumed from
// (the coordinator's last commit); a gang that then failed before a newer commit left the job
// failing every restart with "checkpoint does not exist". Pruning now keeps it.
TEST(CheckpointHardeningTest, PruningKeepsTheCheckpointResumedFrom) {
  ::mlcd::testing::TempDir root;
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  Rig rig(5);
  auto write = [&](int epoch, const std::string& resumed_from) {
    CheckpointState state = rig.State(spec, epoch + 1);
    state.meta.epoch = epoch;
    CheckpointRetention retention;
    retention.keep_last = 1;
    retention.resumed_from = resumed_from;
    auto dir = WriteCheckpoint(root.path(), state, rig.comm.get(), retention);
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    return dir.ok() ? *dir : std::string();
  };
  const std::string resumed = write(0, "");
  for (int epoch = 1; epoch <= 3; ++epoch) write(epoch, resumed);
  const std::vector<std::string> left = ListCheckpoints(root.path());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], resumed);
  EXPECT_NE(left[1].find("ckpt-r0-e3-s1"), std::string::npos) << left[1];
  write(4, "");  // a run by hand that resumed from none: only the newest stays
  EXPECT_EQ(ListCheckpoints(root.path()).size(), 1u);
}

// Within a round the coordinator commits newer checkpoints than the one the gang
// resumed from, and the agent names the last in the committed-checkpoint file. With
// --keep-checkpoints 1 the child used to prune that commit as soon as it wrote a newer
// checkpoint (an aborted gang's child, still running until its agent's next heartbeat, then
// left the job restarting from a checkpoint that did not exist). Now the committed checkpoint
// and every newer one stay; only older ones beyond the newest keep_last go.
TEST(CheckpointHardeningTest, PruningKeepsTheCommittedCheckpointAndNewerOnes) {
  ::mlcd::testing::TempDir root;
  const std::string marker = root.path() + "/agent/committed_checkpoint";
  ASSERT_TRUE(MakeDirs(root.path() + "/agent").ok());
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  Rig rig(7);
  CheckpointRetention retention;
  retention.keep_last = 1;
  retention.committed_file = marker;
  auto write = [&](int epoch) {
    CheckpointState state = rig.State(spec, epoch + 1);
    state.meta.epoch = epoch;
    auto dir = WriteCheckpoint(root.path(), state, rig.comm.get(), retention);
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    return dir.ok() ? *dir : std::string();
  };
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& path : ListCheckpoints(root.path()))
      out.push_back(path.substr(path.rfind('/') + 1));
    return out;
  };
  // A fresh job whose coordinator has committed nothing the agent heard of: all stay.
  const std::string e0 = write(0);
  write(1);
  EXPECT_EQ(names(), (std::vector<std::string>{"ckpt-r0-e0-s1", "ckpt-r0-e1-s1"}));
  // e1 is committed (the file names its path); e2..e4 are written before a newer commit.
  ASSERT_TRUE(WriteFileAtomically(marker, root.path() + "/ckpt-r0-e1-s1\n").ok());
  for (int epoch = 2; epoch <= 4; ++epoch) write(epoch);
  EXPECT_EQ(names(), (std::vector<std::string>{"ckpt-r0-e1-s1", "ckpt-r0-e2-s1", "ckpt-r0-e3-s1",
                                               "ckpt-r0-e4-s1"}))
      << "e0 (older than the commit) goes; the commit and everything newer stays";
  // The coordinator catches up (another mount of the shared root: the name is what counts).
  ASSERT_TRUE(WriteFileAtomically(marker, "/mnt/elsewhere/ckpt/ckpt-r0-e4-s1\n").ok());
  write(5);
  EXPECT_EQ(names(), (std::vector<std::string>{"ckpt-r0-e4-s1", "ckpt-r0-e5-s1"}));
  // Without the file, the checkpoint resumed from is the last commit.
  ASSERT_EQ(::unlink(marker.c_str()), 0);
  retention.resumed_from = root.path() + "/ckpt-r0-e4-s1";
  write(6);
  write(7);
  EXPECT_EQ(names(), (std::vector<std::string>{"ckpt-r0-e4-s1", "ckpt-r0-e5-s1", "ckpt-r0-e6-s1",
                                               "ckpt-r0-e7-s1"}));
  EXPECT_FALSE(IsDirectory(e0));
}

// Before: a job whose checkpoint_dir named another job's root replaced that job's committed
// checkpoint, and its pruning deleted the other job's checkpoints and rewrote LATEST. Now the
// first job to write claims the root (OWNER names it); a second job, or a run by hand, fails
// with FAILED_PRECONDITION naming the owner before it writes or prunes anything there.
TEST(CheckpointHardeningTest, ARootClaimedByAnotherJobIsNeitherWrittenNorPruned) {
  ::mlcd::testing::TempDir root;
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  Rig rig(9);
  auto write = [&](const std::string& job, int epoch) {
    CheckpointState state = rig.State(spec, epoch + 1);
    state.meta.epoch = epoch;
    state.job_id = job;
    CheckpointRetention retention;
    retention.keep_last = 1;
    return WriteCheckpoint(root.path(), state, rig.comm.get(), retention);
  };
  auto first = write("alpha-1", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto owner = ReadFileToString(root.path() + "/OWNER");
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ(*owner, "alpha-1\n");
  const std::string latest = *ReadFileToString(root.path() + "/LATEST");
  const std::string weights = *ReadFileToString(*first + "/backbone.weights.npy");

  // Another job at a later position (it would prune e0 with keep_last 1) and at the same one
  // (it would replace e0), and a run by hand: all refused, nothing changed.
  for (const auto& [job, epoch] :
       {std::pair<std::string, int>{"beta-2", 3}, {"beta-2", 0}, {"", 5}}) {
    auto other = write(job, epoch);
    ASSERT_FALSE(other.ok()) << job;
    EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition) << other.status().ToString();
    EXPECT_NE(other.status().message().find("belongs to job alpha-1"), std::string::npos)
        << other.status().ToString();
    EXPECT_EQ(ListCheckpoints(root.path()), std::vector<std::string>{*first});
    EXPECT_EQ(*ReadFileToString(root.path() + "/LATEST"), latest);
    EXPECT_EQ(*ReadFileToString(*first + "/backbone.weights.npy"), weights);
    EXPECT_FALSE(PathExists(root.path() + "/.tmp-ckpt-r0-e" + std::to_string(epoch) + "-s1"));
  }
  EXPECT_EQ(*ReadFileToString(root.path() + "/OWNER"), *owner);

  // The owner goes on writing (and pruning) as before.
  auto next = write("alpha-1", 1);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(ListCheckpoints(root.path()), std::vector<std::string>{*next});
}

// Before: `offset + numel` of a crafted backbone.json overflowed and the copy read far outside
// the mapped array (SIGSEGV). Now it is DATA_LOSS naming the parameter.
TEST(CheckpointHardeningTest, OverflowingParameterOffsetIsDataLoss) {
  ::mlcd::testing::TempDir root;
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  Rig rig(6);
  auto dir = WriteCheckpoint(root.path(), rig.State(spec, 1), rig.comm.get());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto text = ReadFileToString(*dir + "/backbone.json");
  ASSERT_TRUE(text.ok());
  std::string crafted = *text;
  const size_t at = crafted.find("\"offset\": 0");
  ASSERT_NE(at, std::string::npos) << crafted.substr(0, 400);
  crafted.replace(at, 11, "\"offset\": 9223372036854775800");
  ASSERT_TRUE(WriteFileAtomically(*dir + "/backbone.json", crafted).ok());
  Rig back(7);
  Status st = LoadBackboneWeights(*dir, back.model);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("lies outside the array"), std::string::npos) << st.message();
}

// Found by fuzz_checkpoint_index: an offset written as a float beyond INT64_MAX was converted
// with undefined behaviour. Every integer of the index is checked as an integer now.
TEST(CheckpointHardeningTest, NonIntegerIndexValuesAreDataLoss) {
  for (const char* offset : {"92233720368547755880", "1.5", "-3e30", "\"7\""}) {
    const std::string text = std::string(
                                 "{\"optimizer_step\": 3, \"parameters\": [{\"name\": \"b\", "
                                 "\"shape\": [2], \"offset\": ") +
                             offset + ", \"numel\": 2}]}";
    auto parsed = ParseBackboneIndex(text, "backbone.json", nullptr);
    ASSERT_FALSE(parsed.ok()) << offset;
    EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss) << offset;
  }
  auto ok = ParseBackboneIndex(
      R"({"optimizer_step": 3, "parameters": [{"name": "b", "shape": [2], "offset": 4, "numel": 2}]})",
      "backbone.json", nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at("b").offset, 4);
  EXPECT_FALSE(CheckParamSlice("b", INT64_MAX - 1, 2, 10, "w").ok());
  EXPECT_TRUE(CheckParamSlice("b", 8, 2, 10, "w").ok());
}

// A checkpoint written by one libtorch build and resumed by the other: the pip build's test
// run (scripts/run_torch2_tests.sh) has the Debian build's binary write one (mode "write":
// after one step, with the embeddings its weights give) and then reads it (mode "read"):
// backbone, optimizer state and class centres restored, the same embeddings.
TEST(CrossBuildCheckpointTest, WriteOrRead) {
  const char* root_env = std::getenv("MLCD_CROSS_BUILD_CHECKPOINT");
  if (root_env == nullptr || *root_env == '\0') {
    GTEST_SKIP() << "MLCD_CROSS_BUILD_CHECKPOINT not set (scripts/run_torch2_tests.sh sets it)";
  }
  const std::string root = root_env;
  const char* mode_env = std::getenv("MLCD_CROSS_BUILD_MODE");
  const std::string mode = mode_env ? mode_env : "";
  torch::Tensor x = Images(4), y = Labels(4);
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  if (mode == "write") {
    Rig rig(31);
    TrainStep step(rig.Parts(), torch::Device(torch::kCPU), Precision::kFp32);
    ASSERT_TRUE(step.Run(x, y, 1e-3, 1e-3).ok());
    auto dir = WriteCheckpoint(root, rig.State(spec, 1), rig.comm.get());
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    rig.model->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor e = rig.model->forward(x).contiguous();
    ASSERT_TRUE(
        WriteNpy(root + "/embeddings.npy", NpyDtype::kFloat32, e.sizes().vec(), e.data_ptr<float>())
            .ok());
    torch::Tensor w = rig.fc->weight().contiguous();
    ASSERT_TRUE(
        WriteNpy(root + "/centres.npy", NpyDtype::kFloat32, w.sizes().vec(), w.data_ptr<float>())
            .ok());
    return;
  }
  ASSERT_EQ(mode, "read") << "MLCD_CROSS_BUILD_MODE must be write or read";
  Rig rig(99);  // other initial weights: the load must replace every one
  auto dir = ResolveCheckpoint(root);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_TRUE(LoadBackboneWeights(*dir, rig.model).ok());
  ASSERT_TRUE(LoadBackboneOptimizer(*dir, rig.model, rig.flat.get(), rig.optimizer.get()).ok());
  ASSERT_TRUE(rig.fc->Load(*dir).ok());
  EXPECT_EQ(rig.optimizer->step_count(), 1);
  EXPECT_GT(rig.optimizer->exp_avg().abs().sum().item<double>(), 0.0);
  auto read = [&](const std::string& name) {
    std::vector<int64_t> shape;
    auto data = ReadNpyAsFloat32(root + "/" + name, &shape);
    EXPECT_TRUE(data.ok()) << data.status().ToString();
    return torch::from_blob(data->data(), {shape[0], shape[1]}, torch::kFloat).clone();
  };
  EXPECT_TRUE(torch::equal(rig.fc->weight(), read("centres.npy")));
  rig.model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxAbsDiff(rig.model->forward(x), read("embeddings.npy")), 1e-5)
      << "libtorch " << compat::TorchVersion();
}

}  // namespace
}  // namespace mlcd::worker
