#include "worker/train/replicated_head.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

#include "common/confined_file.h"
#include "common/npy.h"
#include "worker/train/checkpoint_index.h"

namespace mlcd::worker {
namespace {

using nlohmann::json;

std::vector<std::vector<torch::Tensor>> Groups(torch::nn::Module& module) {
  std::vector<std::vector<torch::Tensor>> groups(2);
  for (const auto& p : module.parameters()) groups[p.dim() >= 2 ? 0 : 1].push_back(p);
  return groups;
}

// (name, parameter) of `module` in the flat buffer's order: the decayed group, then the rest.
std::vector<std::pair<std::string, torch::Tensor>> FlatOrder(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (int group = 0; group < 2; ++group) {
    for (const auto& item : module.named_parameters()) {
      if ((item.value().dim() >= 2) == (group == 0)) out.emplace_back(item.key(), item.value());
    }
  }
  return out;
}

}  // namespace

ReplicatedHead::ReplicatedHead(std::shared_ptr<torch::nn::Module> module, Collectives* comm,
                               ReplicatedHeadOptions options)
    : module_(std::move(module)), comm_(comm), options_(std::move(options)) {
  flat_ = std::make_unique<FlatParameters>(Groups(*module_));
  optimizer_ = std::make_unique<BackboneAdamW>(flat_.get(), options_.adamw);
}

Status ReplicatedHead::BroadcastParameters() {
  if (comm_->world_size() <= 1) return Status::Ok();
  std::vector<at::Tensor> values{flat_->values()};
  return comm_->Broadcast(values, 0).WithContext("broadcasting the " + options_.name);
}

Status ReplicatedHead::AllReduceGradients() {
  if (comm_->world_size() > 1) {
    MLCD_RETURN_IF_ERROR(
        comm_->AllReduce(flat_->grads()).WithContext("summing the " + options_.name + " gradient"));
  }
  if (!torch::isfinite(flat_->grads()).all().item<bool>()) {
    return Status::InvalidArgument(
        "the " + options_.name + " gradient is non-finite (NaN or infinite); nothing was applied");
  }
  return Status::Ok();
}

StatusOr<BackboneStepStats> ReplicatedHead::Step(double lr) {
  return optimizer_->CheckedStep(lr, 1.0);
}

Status ReplicatedHead::Save(const std::string& dir) const {
  if (comm_->rank() != 0) return Status::Ok();
  json params = json::array();
  for (const auto& [name, p] : FlatOrder(*module_)) {
    const int64_t offset = p.data_ptr<float>() - flat_->values().data_ptr<float>();
    params.push_back(
        {{"name", name}, {"shape", p.sizes().vec()}, {"offset", offset}, {"numel", p.numel()}});
  }
  const int64_t n = flat_->numel();
  const std::string prefix = dir + "/" + options_.name;
  auto write = [&](const char* suffix, const torch::Tensor& t) {
    torch::Tensor c = t.cpu().contiguous();
    return WriteNpy(prefix + suffix, NpyDtype::kFloat32, {n}, c.data_ptr<float>());
  };
  MLCD_RETURN_IF_ERROR(write(".weights.npy", flat_->values()));
  MLCD_RETURN_IF_ERROR(write(".exp_avg.npy", optimizer_->exp_avg()));
  MLCD_RETURN_IF_ERROR(write(".exp_avg_sq.npy", optimizer_->exp_avg_sq()));
  json j{{"parameters", params}, {"numel", n}, {"optimizer_step", optimizer_->step_count()}};
  return WriteConfinedFile(prefix + ".json", j.dump(2) + "\n");
}

Status ReplicatedHead::Load(const std::string& dir) {
  const std::string prefix = dir + "/" + options_.name;
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(prefix + ".json"));
  int64_t step = 0;
  MLCD_ASSIGN_OR_RETURN(auto saved, ParseBackboneIndex(text, prefix + ".json", &step));
  const auto mine = FlatOrder(*module_);
  if (saved.size() != mine.size()) {
    return Status::InvalidArgument(prefix + ".json holds " + std::to_string(saved.size()) +
                                   " parameters but this " + options_.name + " has " +
                                   std::to_string(mine.size()) +
                                   ": it was built with other sizes (see the checkpoint's spec)");
  }
  // Staged in host buffers, then copied to the head's device at once.
  const int64_t n = flat_->numel();
  std::vector<torch::Tensor> staged;
  for (const char* suffix : {".weights.npy", ".exp_avg.npy", ".exp_avg_sq.npy"}) {
    MLCD_ASSIGN_OR_RETURN(MappedNpy npy, MappedNpy::Open(prefix + suffix));
    if (npy.dtype() != NpyDtype::kFloat32 || npy.header().shape.size() != 1) {
      return Status::DataLoss(npy.path() + ": expected a 1-d float32 array");
    }
    const int64_t total = npy.header().shape[0];
    torch::Tensor out = torch::empty({n}, torch::kFloat);
    for (const auto& [name, p] : mine) {
      auto it = saved.find(name);
      if (it == saved.end() || it->second.shape != p.sizes().vec()) {
        return Status::InvalidArgument(
            "the " + options_.name + " parameter '" + name + "' is " +
            (it == saved.end() ? std::string("missing from ") : "of another shape in ") + prefix +
            ".json: it was built with other sizes (see the checkpoint's spec)");
      }
      MLCD_RETURN_IF_ERROR(CheckParamSlice(name, it->second.offset, p.numel(), total, npy.path()));
      const int64_t offset = p.data_ptr<float>() - flat_->values().data_ptr<float>();
      std::memcpy(out.data_ptr<float>() + offset, npy.data_as<float>() + it->second.offset,
                  static_cast<size_t>(p.numel()) * sizeof(float));
    }
    staged.push_back(out);
  }
  {
    torch::NoGradGuard no_grad;
    flat_->values().copy_(staged[0]);
  }
  return optimizer_->LoadState(step, staged[1], staged[2]);
}

}  // namespace mlcd::worker
