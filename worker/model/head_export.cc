#include "worker/model/head_export.h"

#include <string>

#include "common/file_util.h"

namespace mlcd::worker {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::vector<ExportTensor> HeadStateDict(torch::nn::Module& head, const std::string& prefix) {
  std::vector<ExportTensor> out;
  for (const auto& item : head.named_parameters()) {
    out.push_back({prefix + item.key(),
                   item.value().detach().to(torch::kCPU, torch::kFloat).contiguous().clone()});
  }
  return out;
}

std::map<std::string, std::string> MulconHeadMetadata(const LabelAttentionHeadImpl& head) {
  return {{kMulconHeadsKey, std::to_string(head.options().heads)}};
}

Status WriteHeadSafetensors(const std::string& path, const std::vector<ExportTensor>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensor> views;
  for (const ExportTensor& t : tensors) {
    views.push_back({t.name, t.value.sizes().vec(), t.value.data_ptr<float>()});
  }
  return WriteSafetensors(path, views, metadata);
}

StatusOr<LabelAttentionHead> ReadMulconHead(const SafetensorsFile& file) {
  auto shape_of = [&](const std::string& name, size_t dims) -> StatusOr<std::vector<int64_t>> {
    auto it = file.tensors.find(kMulconHeadPrefix + name);
    if (it == file.tensors.end())
      return Status::InvalidArgument("the head file has no tensor " + (kMulconHeadPrefix + name));
    if (it->second.shape.size() != dims) {
      return Status::InvalidArgument(kMulconHeadPrefix + name + " has shape " +
                                     ShapeString(it->second.shape) + ", expected " +
                                     std::to_string(dims) + " dimensions");
    }
    return it->second.shape;
  };
  LabelAttentionOptions o;
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> u, shape_of("label_embeddings", 2));
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> w, shape_of("classifier_weight", 2));
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> p, shape_of("projector_out.weight", 2));
  o.num_labels = u[0];
  o.token_dim = u[1];
  o.label_dim = w[1];
  o.projection_dim = p[0];
  auto heads = file.metadata.find(kMulconHeadsKey);
  if (heads == file.metadata.end())
    return Status::InvalidArgument(std::string("the head file has no metadata key ") +
                                   kMulconHeadsKey + " (the number of attention heads)");
  try {
    o.heads = std::stoll(heads->second);
  } catch (const std::exception&) {
    return Status::InvalidArgument(std::string("metadata ") + kMulconHeadsKey + " is '" +
                                   heads->second + "', not a number");
  }
  MLCD_RETURN_IF_ERROR(ValidateLabelAttentionOptions(o).WithContext("the head file"));
  LabelAttentionHead head(o);
  MLCD_RETURN_IF_ERROR(LoadHeadTensors(*head, file, kMulconHeadPrefix));
  return head;
}

StatusOr<std::string> ExportCheckpointHead(const std::string& checkpoint_dir,
                                           const std::string& out, bool directory) {
  const std::string source = checkpoint_dir + "/" + kLabelHeadFile;
  if (!PathExists(source)) return std::string();
  MLCD_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(source));
  std::string target;
  if (directory) {
    target = out + "/" + kLabelHeadFile;
  } else {
    const size_t slash = out.find_last_of('/');
    const size_t dot = out.find_last_of('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    target = (has_ext ? out.substr(0, dot) : out) + ".head.safetensors";
  }
  std::vector<SafetensorsTensor> views;
  for (const auto& [name, t] : file.tensors) views.push_back({name, t.shape, t.values.data()});
  MLCD_RETURN_IF_ERROR(WriteSafetensors(target, views, file.metadata));
  return target;
}

Status LoadHeadTensors(torch::nn::Module& head, const SafetensorsFile& file,
                       const std::string& prefix) {
  torch::NoGradGuard no_grad;
  for (auto& item : head.named_parameters()) {
    const std::string name = prefix + item.key();
    auto it = file.tensors.find(name);
    if (it == file.tensors.end())
      return Status::InvalidArgument("the head file has no tensor " + name);
    torch::Tensor& p = item.value();
    if (it->second.shape != p.sizes().vec()) {
      return Status::InvalidArgument(name + " has shape " + ShapeString(it->second.shape) +
                                     ", the head expects " + ShapeString(p.sizes().vec()));
    }
    p.copy_(
        torch::from_blob(const_cast<float*>(it->second.values.data()), p.sizes(), torch::kFloat));
  }
  return Status::Ok();
}

}  // namespace mlcd::worker
