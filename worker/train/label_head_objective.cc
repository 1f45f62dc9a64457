#include "worker/train/label_head_objective.h"

#include <chrono>
#include <cmath>
#include <utility>

#include "common/stopwatch.h"
#include "worker/loss/llcl.h"
#include "worker/loss/multilabel_bce.h"
#include "worker/model/head_export.h"

namespace mlcd::worker {
namespace {

constexpr const char* kHeadFile = kLabelHeadFile;
constexpr char kOptimizerFile[] = "label_head.optimizer.pt";
constexpr char kStepKey[] = "label_head.step";

}  // namespace

StatusOr<std::unique_ptr<LabelHeadObjective>> LabelHeadObjective::Create(
    const LabelHeadObjectiveOptions& options, Collectives* comm) {
  if (options.num_classes < 1)
    return Status::InvalidArgument("a label head needs at least one class");
  LabelHeadObjectiveOptions o = options;
  if (o.variant == LabelHeadVariant::kBce) {
    if (o.embedding_dim < 1)
      return Status::InvalidArgument("the bce head needs embedding_dim >= 1");
  } else {
    o.head.num_labels = o.num_classes;
    MLCD_RETURN_IF_ERROR(ValidateLabelAttentionOptions(o.head).WithContext("loss.mulcon"));
    if (!(o.temperature > 0) || !(o.llcl_weight >= 0) || o.pretrain_steps < 0 ||
        !(o.contrastive_lr_multiplier > 0)) {
      return Status::InvalidArgument(
          "mulcon needs temperature > 0, llcl_weight >= 0, pretrain_steps >= 0 and "
          "contrastive_lr_multiplier > 0");
    }
  }
  return std::unique_ptr<LabelHeadObjective>(new LabelHeadObjective(o, comm));
}

LabelHeadObjective::LabelHeadObjective(const LabelHeadObjectiveOptions& options, Collectives* comm)
    : options_(options), comm_(comm) {
  if (options_.variant == LabelHeadVariant::kBce) {
    bce_ = BceHead(options_.embedding_dim, options_.num_classes);
    bce_->ResetParameters(options_.seed);
    module_ = bce_.ptr();
  } else {
    mulcon_ = LabelAttentionHead(options_.head);
    mulcon_->ResetParameters(options_.seed);
    module_ = mulcon_.ptr();
  }
  // Initialised on the host (the same values on every device), then moved.
  module_->to(options_.device);
  torch::optim::AdamWOptions adam(1e-3);
  adam.betas({options_.beta1, options_.beta2}).weight_decay(options_.weight_decay);
  optimizer_ = std::make_unique<torch::optim::AdamW>(module_->parameters(), adam);
}

ObjectiveNeeds LabelHeadObjective::needs() const {
  ObjectiveNeeds n;
  n.patch_tokens = options_.variant == LabelHeadVariant::kMulCon;
  return n;
}

bool LabelHeadObjective::contrastive() const {
  return options_.variant == LabelHeadVariant::kMulCon && steps_ >= options_.pretrain_steps;
}

double LabelHeadObjective::learning_rate_multiplier() const {
  return contrastive() ? options_.contrastive_lr_multiplier : 1.0;
}

std::string LabelHeadObjective::Describe() const {
  if (options_.variant == LabelHeadVariant::kBce) {
    return "bce head " + std::to_string(options_.embedding_dim) + " -> " +
           std::to_string(options_.num_classes) + " classes";
  }
  const LabelAttentionOptions& h = options_.head;
  return "mulcon head: " + std::to_string(h.num_labels) + " labels x " +
         std::to_string(h.label_dim) + ", " + std::to_string(h.heads) + " heads, projection " +
         std::to_string(h.projection_dim) + "; BCE alone for " +
         std::to_string(options_.pretrain_steps) + " steps, then BCE + " +
         std::to_string(options_.llcl_weight) + " x LLCL at " +
         std::to_string(options_.contrastive_lr_multiplier) + " x the learning rate";
}

StatusOr<ObjectiveStep> LabelHeadObjective::ForwardBackward(const BackboneOutput& out,
                                                            const torch::Tensor& labels) {
  const auto t0 = std::chrono::steady_clock::now();
  DiscardGradient();
  ObjectiveStep step;
  const torch::Tensor e =
      out.embeddings.detach().requires_grad_(options_.variant == LabelHeadVariant::kBce);
  torch::Tensor total;
  if (options_.variant == LabelHeadVariant::kBce) {
    MLCD_ASSIGN_OR_RETURN(MultiLabelBceResult r, MultiLabelBce(*comm_, bce_->forward(e), labels));
    total = r.local_term;
    step.loss = r.loss;
    step.stats.global_batch_size = r.global_samples;
    total.backward();
    step.grad_embeddings = e.grad();
  } else {
    if (!out.patch_tokens.defined())
      return Status::InvalidArgument("the mulcon head needs the backbone's patch tokens");
    const torch::Tensor t = out.patch_tokens.detach().requires_grad_();
    LabelAttentionOutput o = mulcon_->forward(t);
    MLCD_ASSIGN_OR_RETURN(MultiLabelBceResult r, MultiLabelBce(*comm_, o.logits, labels));
    total = r.local_term;
    double llcl_loss = 0;
    if (contrastive()) {
      const torch::Tensor z = mulcon_->Project(o.embeddings);
      MLCD_ASSIGN_OR_RETURN(
          LlclStep s, LlclForwardBackward({options_.temperature}, *comm_, z.detach(), labels));
      total = total + options_.llcl_weight * (z * s.grad_embeddings).sum();
      llcl_loss = s.loss;
      step.stats.mean_positives = s.stats.mean_positives;
      step.stats.anchors_without_positives = s.stats.anchors_without_positives;
      step.stats.extra.push_back(
          {"active_label_embeddings", static_cast<double>(s.stats.global_batch_size)});
    }
    total.backward();
    step.loss = r.loss + (contrastive() ? options_.llcl_weight * llcl_loss : 0.0);
    step.stats.global_batch_size = r.global_samples;
    step.stats.extra.push_back({"bce_loss", r.loss});
    step.stats.extra.push_back({"llcl_loss", llcl_loss});
    step.grad_embeddings = torch::zeros_like(out.embeddings);
    step.grad_patch_tokens = t.grad();
  }
  step.stats.loss = step.loss;
  pending_ = true;
  step.compute_seconds = SecondsBetween(t0, std::chrono::steady_clock::now());
  return step;
}

Status LabelHeadObjective::AllReduceGradients() {
  std::vector<torch::Tensor> grads;
  for (torch::Tensor& p : module_->parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  MLCD_RETURN_IF_ERROR(comm_->AllReduce(grads, ReduceOp::kSum));
  // One reduction and one read for all of them: the contract's check costs one host sync.
  std::vector<torch::Tensor> finite;
  finite.reserve(grads.size());
  for (const torch::Tensor& g : grads) finite.push_back(torch::isfinite(g).all());
  if (!torch::stack(finite).all().item<bool>())
    return Status::InvalidArgument("the label head's summed gradient is not finite");
  return Status::Ok();
}

Status LabelHeadObjective::OptimizerStep(double lr) {
  if (!pending_) return Status::FailedPrecondition("the label head has no pending gradient");
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  optimizer_->step();
  ++steps_;
  DiscardGradient();
  return Status::Ok();
}

void LabelHeadObjective::DiscardGradient() {
  for (torch::Tensor& p : module_->parameters()) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
  pending_ = false;
}

Status LabelHeadObjective::Save(const std::string& dir) const {
  if (comm_->rank() != 0) return Status::Ok();
  const bool bce = options_.variant == LabelHeadVariant::kBce;
  std::map<std::string, std::string> metadata =
      bce ? std::map<std::string, std::string>{} : MulconHeadMetadata(*mulcon_);
  metadata[kStepKey] = std::to_string(steps_);
  MLCD_RETURN_IF_ERROR(WriteHeadSafetensors(
      dir + "/" + kHeadFile, HeadStateDict(*module_, bce ? kBceHeadPrefix : kMulconHeadPrefix),
      metadata));
  try {
    torch::save(*optimizer_, dir + "/" + kOptimizerFile);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("writing the label head's optimizer state: ") + e.what());
  }
  return Status::Ok();
}

Status LabelHeadObjective::Load(const std::string& dir) {
  MLCD_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(dir + "/" + kHeadFile));
  const bool bce = options_.variant == LabelHeadVariant::kBce;
  MLCD_RETURN_IF_ERROR(LoadHeadTensors(*module_, file, bce ? kBceHeadPrefix : kMulconHeadPrefix)
                           .WithContext(dir + "/" + kHeadFile));
  auto step = file.metadata.find(kStepKey);
  if (step == file.metadata.end())
    return Status::DataLoss(dir + "/" + kHeadFile + " has no " + kStepKey + " metadata");
  steps_ = std::stoll(step->second);
  try {
    torch::load(*optimizer_, dir + "/" + kOptimizerFile);
  } catch (const std::exception& e) {
    return Status::DataLoss("reading " + dir + "/" + kOptimizerFile + ": " + e.what());
  }
  pending_ = false;
  return Status::Ok();
}

std::vector<torch::Tensor> LabelHeadObjective::Parameters() const { return module_->parameters(); }

}  // namespace mlcd::worker
