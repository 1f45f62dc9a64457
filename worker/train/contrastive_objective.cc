#include "worker/train/contrastive_objective.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>

#include "common/stopwatch.h"

namespace mlcd::worker {

Status ValidateContrastiveObjectiveOptions(const ContrastiveObjectiveOptions& o) {
  MLCD_RETURN_IF_ERROR(ValidateContrastiveOptions(o.loss));
  if (o.embedding_dim < 1) {
    return Status::InvalidArgument("embedding_dim must be >= 1, got " +
                                   std::to_string(o.embedding_dim));
  }
  if (o.projection_dim < 0 || o.projection_hidden_dim < 0) {
    return Status::InvalidArgument("projection sizes must be >= 0 (0 = no head), got hidden " +
                                   std::to_string(o.projection_hidden_dim) + ", output " +
                                   std::to_string(o.projection_dim));
  }
  if (o.projection_dim > 0 && o.projection_hidden_dim < 1) {
    return Status::InvalidArgument("a projection head of output " +
                                   std::to_string(o.projection_dim) + " needs a hidden width >= 1");
  }
  return Status::Ok();
}

ContrastiveObjective::ContrastiveObjective(ContrastiveObjectiveOptions options, Collectives* comm)
    : options_(std::move(options)), comm_(comm) {}

StatusOr<std::unique_ptr<ContrastiveObjective>> ContrastiveObjective::Create(
    const ContrastiveObjectiveOptions& options, Collectives* comm) {
  MLCD_RETURN_IF_ERROR(ValidateContrastiveObjectiveOptions(options));
  std::unique_ptr<ContrastiveObjective> o(new ContrastiveObjective(options, comm));
  if (options.projection_dim == 0) return o;
  namespace nn = torch::nn;
  o->module_ = nn::Sequential(
      nn::Linear(nn::LinearOptions(options.embedding_dim, options.projection_hidden_dim)),
      nn::ReLU(),
      nn::Linear(nn::LinearOptions(options.projection_hidden_dim, options.projection_dim)));
  {
    // PyTorch's Linear default, drawn from the head's own generator on the host.
    torch::NoGradGuard no_grad;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    for (size_t layer : {size_t{0}, size_t{2}}) {
      auto* linear = o->module_[layer]->as<nn::LinearImpl>();
      const double bound = 1.0 / std::sqrt(static_cast<double>(linear->weight.size(1)));
      linear->weight.uniform_(-bound, bound, gen);
      linear->bias.uniform_(-bound, bound, gen);
    }
  }
  o->module_->to(options.device);
  ReplicatedHeadOptions hopts;
  hopts.name = "projection_head";
  hopts.adamw = options.adamw;
  o->head_ = std::make_unique<ReplicatedHead>(o->module_.ptr(), comm, hopts);
  MLCD_RETURN_IF_ERROR(o->head_->BroadcastParameters());
  return o;
}

ObjectiveNeeds ContrastiveObjective::needs() const {
  ObjectiveNeeds n;
  n.labels = options_.loss.variant != ContrastiveVariant::kInfoNce;
  return n;
}

std::string ContrastiveObjective::Describe() const {
  std::string head = options_.projection_dim == 0
                         ? "no projection head"
                         : "projection head " + std::to_string(options_.embedding_dim) + "-" +
                               std::to_string(options_.projection_hidden_dim) + "-" +
                               std::to_string(options_.projection_dim);
  return std::string(ContrastiveVariantName(options_.loss.variant)) + " (temperature " +
         std::to_string(options_.loss.temperature) + ", " + head + ")";
}

StatusOr<ObjectiveStep> ContrastiveObjective::ForwardBackward(const BackboneOutput& out,
                                                              const torch::Tensor& labels) {
  const auto start = std::chrono::steady_clock::now();
  pending_ = false;
  torch::Tensor e, z;
  if (head_) {
    head_->ZeroGrad();
    e = out.embeddings.detach().requires_grad_(true);
    z = module_->forward(e);
  } else {
    z = out.embeddings;
  }
  MLCD_ASSIGN_OR_RETURN(ContrastiveStep c,
                        ContrastiveForwardBackward(options_.loss, *comm_, z.detach(), labels));
  ObjectiveStep step;
  if (head_) {
    z.backward(c.grad_embeddings);
    step.grad_embeddings = e.grad();
  } else {
    step.grad_embeddings = c.grad_embeddings;
  }
  step.loss = c.loss;
  step.stats.loss = c.stats.loss;
  step.stats.global_batch_size = c.stats.global_batch_size;
  step.stats.mean_positives = c.stats.mean_positives;
  step.stats.anchors_without_positives = c.stats.anchors_without_positives;
  step.collective_seconds = c.collective_seconds;
  step.compute_seconds =
      SecondsBetween(start, std::chrono::steady_clock::now()) - c.collective_seconds;
  pending_ = true;
  return step;
}

Status ContrastiveObjective::AllReduceGradients() {
  return head_ ? head_->AllReduceGradients() : Status::Ok();
}

Status ContrastiveObjective::OptimizerStep(double lr) {
  if (!pending_) {
    return Status::FailedPrecondition(
        "no contrastive gradient is pending (ForwardBackward did not run or failed)");
  }
  pending_ = false;
  if (!head_) return Status::Ok();
  return head_->Step(lr).status();
}

void ContrastiveObjective::DiscardGradient() {
  pending_ = false;
  if (head_) head_->ZeroGrad();
}

Status ContrastiveObjective::Save(const std::string& dir) const {
  return head_ ? head_->Save(dir) : Status::Ok();
}

Status ContrastiveObjective::Load(const std::string& dir) {
  return head_ ? head_->Load(dir) : Status::Ok();
}

std::vector<torch::Tensor> ContrastiveObjective::Parameters() const {
  return head_ ? head_->Parameters() : std::vector<torch::Tensor>{};
}

}  // namespace mlcd::worker
