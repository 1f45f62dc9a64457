#include "worker/loss/label_head_check.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/even_split.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "worker/loss/bce_head.h"
#include "worker/loss/llcl.h"
#include "worker/loss/multilabel_bce.h"
#include "worker/model/head_export.h"

namespace mlcd::worker {
namespace {

Status Bad(const std::string& message) { return Status::InvalidArgument(message); }

// Rank 0 gets the ranks' rows [n_r, ...] (in rank order, B in all) as one [B, ...] tensor;
// the others an undefined one. A collective.
StatusOr<at::Tensor> GatherRows(Collectives& comm, const at::Tensor& mine, int64_t B) {
  const int world = comm.world_size();
  int64_t n_max = 0;
  for (int r = 0; r < world; ++r)
    n_max = std::max(n_max, EvenSplitBegin(B, world, r + 1) - EvenSplitBegin(B, world, r));
  std::vector<int64_t> shape = mine.sizes().vec();
  shape[0] = n_max;
  at::Tensor padded = at::zeros(shape, mine.options());
  padded.narrow(0, 0, mine.size(0)).copy_(mine);
  at::Tensor gathered;
  MLCD_RETURN_IF_ERROR(comm.AllGather(padded, &gathered));
  if (comm.rank() != 0) return at::Tensor();
  std::vector<at::Tensor> parts;
  for (int r = 0; r < world; ++r) {
    parts.push_back(gathered.narrow(0, r * n_max,
                                    EvenSplitBegin(B, world, r + 1) - EvenSplitBegin(B, world, r)));
  }
  return at::cat(parts, 0).contiguous();
}

Status WriteArray(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return WriteNpy(path, NpyDtype::kFloat32, c.sizes().vec(), c.data_ptr());
}

Status CheckFinite(const std::string& flag, const std::string& path, const at::Tensor& t) {
  if (!at::isfinite(t).all().item<bool>())
    return Bad(flag + " " + path + " contains NaN or infinity");
  return Status::Ok();
}

}  // namespace

StatusOr<at::Tensor> ReadCheckArray(const std::string& flag, const std::string& path,
                                    bool want_float, int min_dim, int max_dim) {
  if (path.empty()) return Bad(flag + " is required");
  auto map = MappedNpy::Open(path);
  if (!map.ok()) return map.status().WithContext(flag);
  const NpyHeader& h = map->header();
  const int dims = static_cast<int>(h.shape.size());
  std::string shape;
  for (size_t i = 0; i < h.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(h.shape[i]);
  if (dims < min_dim || dims > max_dim) {
    return Bad(flag + " " + path + ": expected a " +
               (min_dim == max_dim ? std::to_string(min_dim)
                                   : std::to_string(min_dim) + "- or " + std::to_string(max_dim)) +
               "-d array, got shape (" + shape + ")");
  }
  if (want_float) {
    if (h.dtype != NpyDtype::kFloat32) {
      return Bad(flag + " " + path + ": expected float32, got " + NpyDtypeName(h.dtype) +
                 " (convert with .astype(np.float32))");
    }
    return at::from_blob(const_cast<void*>(map->data()), h.shape, at::kFloat).clone();
  }
  if (h.dtype != NpyDtype::kInt64 && h.dtype != NpyDtype::kInt32)
    return Bad(flag + " " + path + ": expected int64, got " + NpyDtypeName(h.dtype));
  const at::ScalarType type = h.dtype == NpyDtype::kInt64 ? at::kLong : at::kInt;
  return at::from_blob(const_cast<void*>(map->data()), h.shape, type).to(at::kLong).clone();
}

StatusOr<LabelHeadCheckInputs> ReadLabelHeadCheckInputs(const LabelHeadCheckRequest& q) {
  LabelHeadCheckInputs in;
  const bool bce = q.variant == LabelHeadVariant::kBce;
  const bool whole_head = !bce && !q.tokens.empty();
  if (!std::isfinite(q.temperature) || !(q.temperature > 0))
    return Bad("--temperature must be a finite number > 0");
  if (!std::isfinite(q.llcl_weight) || q.llcl_weight < 0)
    return Bad("--llcl-weight must be a finite number >= 0");
  if (bce && (!q.tokens.empty() || !q.head.empty()))
    return Bad("--tokens and --head are for variant mulcon; bce takes --embeddings and --weights");
  if (!bce && (!q.weights.empty() || !q.bias.empty()))
    return Bad("--weights and --bias are for variant bce; mulcon takes --head H.safetensors");
  if (!bce && q.tokens.empty() == q.embeddings.empty())
    return Bad(
        "variant mulcon takes either --embeddings Z.npy [B, L, d_z] (the contrastive "
        "loss alone) or --tokens T.npy [B, P, C] with --head H.safetensors");
  if (!bce && whole_head == q.head.empty())
    return Bad("--head H.safetensors goes with --tokens, and only with it");
  MLCD_ASSIGN_OR_RETURN(in.Y, ReadCheckArray("--labels", q.labels, false, 1, 2));
  if (in.Y.dim() == 1) in.Y = in.Y.unsqueeze(1);
  int64_t B = 0, K = 0;
  if (bce) {
    MLCD_ASSIGN_OR_RETURN(in.E, ReadCheckArray("--embeddings", q.embeddings, true, 2, 2));
    MLCD_ASSIGN_OR_RETURN(in.W, ReadCheckArray("--weights", q.weights, true, 2, 2));
    MLCD_RETURN_IF_ERROR(CheckFinite("--embeddings", q.embeddings, in.E));
    MLCD_RETURN_IF_ERROR(CheckFinite("--weights", q.weights, in.W));
    B = in.E.size(0);
    K = in.W.size(0);
    if (in.W.size(1) != in.E.size(1) || K < 1) {
      return Bad("--weights " + q.weights + " must be [K, D] with K >= 1 and D = " +
                 std::to_string(in.E.size(1)) + " (the embeddings' columns)");
    }
    if (q.bias.empty()) {
      in.b = at::zeros({K}, at::kFloat);
    } else {
      MLCD_ASSIGN_OR_RETURN(in.b, ReadCheckArray("--bias", q.bias, true, 1, 1));
      MLCD_RETURN_IF_ERROR(CheckFinite("--bias", q.bias, in.b));
      if (in.b.size(0) != K)
        return Bad("--bias " + q.bias + " has " + std::to_string(in.b.size(0)) +
                   " entries but --weights has " + std::to_string(K) + " classes");
    }
  } else if (!whole_head) {
    MLCD_ASSIGN_OR_RETURN(in.E, ReadCheckArray("--embeddings", q.embeddings, true, 3, 3));
    MLCD_RETURN_IF_ERROR(CheckFinite("--embeddings", q.embeddings, in.E));
    B = in.E.size(0);
    K = in.E.size(1);
  } else {
    MLCD_ASSIGN_OR_RETURN(in.T, ReadCheckArray("--tokens", q.tokens, true, 3, 3));
    MLCD_RETURN_IF_ERROR(CheckFinite("--tokens", q.tokens, in.T));
    MLCD_ASSIGN_OR_RETURN(in.head, ReadSafetensors(q.head));
    MLCD_ASSIGN_OR_RETURN(LabelAttentionHead head, ReadMulconHead(in.head));
    B = in.T.size(0);
    K = head->options().num_labels;
    if (in.T.size(2) != head->options().token_dim || in.T.size(1) < 1) {
      return Bad("--tokens " + q.tokens + " must be [B, P, C] with P >= 1 and C = " +
                 std::to_string(head->options().token_dim) + " (the head's token dimension)");
    }
  }
  if (B < 1) return Bad("the batch needs at least one sample");
  const std::string label_error = CheckMultiLabels(in.Y, B, K);
  if (!label_error.empty()) return Bad("--labels " + q.labels + ": " + label_error);
  return in;
}

Status RunLabelHeadCheckRank(const LabelHeadCheckRequest& q, const LabelHeadCheckInputs& in,
                             Collectives& comm) {
  const int world = comm.world_size(), rank = comm.rank();
  const int64_t B = in.Y.size(0);
  const int64_t b0 = EvenSplitBegin(B, world, rank), n = EvenSplitBegin(B, world, rank + 1) - b0;
  const at::Tensor Y = in.Y.narrow(0, b0, n);
  std::vector<std::pair<std::string, at::Tensor>> arrays;  // rank 0's outputs
  double loss = 0, bce_loss = 0, llcl_loss = 0;
  int64_t active = 0;
  if (q.variant == LabelHeadVariant::kBce) {
    BceHead head(in.E.size(1), in.W.size(0));
    {
      torch::NoGradGuard no_grad;
      head->named_parameters()["weight"].copy_(in.W);
      head->named_parameters()["bias"].copy_(in.b);
    }
    const at::Tensor e = in.E.narrow(0, b0, n).clone().requires_grad_();
    MLCD_ASSIGN_OR_RETURN(MultiLabelBceResult r, MultiLabelBce(comm, head->forward(e), Y));
    r.local_term.backward();
    loss = bce_loss = r.loss;
    std::vector<at::Tensor> grads = {head->named_parameters()["weight"].grad(),
                                     head->named_parameters()["bias"].grad()};
    MLCD_RETURN_IF_ERROR(comm.AllReduce(grads, ReduceOp::kSum));
    MLCD_ASSIGN_OR_RETURN(at::Tensor grad_e, GatherRows(comm, e.grad(), B));
    arrays = {{"grad_embeddings", grad_e}, {"grad_weights", grads[0]}, {"grad_bias", grads[1]}};
  } else if (in.E.defined()) {
    MLCD_ASSIGN_OR_RETURN(LlclStep step,
                          LlclForwardBackward({q.temperature}, comm, in.E.narrow(0, b0, n), Y));
    loss = llcl_loss = step.loss;
    active = step.stats.global_batch_size;
    MLCD_ASSIGN_OR_RETURN(at::Tensor grad_e, GatherRows(comm, step.grad_embeddings, B));
    arrays = {{"grad_embeddings", grad_e}};
  } else {
    MLCD_ASSIGN_OR_RETURN(LabelAttentionHead head, ReadMulconHead(in.head));
    const at::Tensor t = in.T.narrow(0, b0, n).clone().requires_grad_();
    LabelAttentionOutput out = head->forward(t);
    MLCD_ASSIGN_OR_RETURN(MultiLabelBceResult r, MultiLabelBce(comm, out.logits, Y));
    const at::Tensor z = head->Project(out.embeddings);
    MLCD_ASSIGN_OR_RETURN(LlclStep step, LlclForwardBackward({q.temperature}, comm, z.detach(), Y));
    (r.local_term + q.llcl_weight * (z * step.grad_embeddings).sum()).backward();
    bce_loss = r.loss;
    llcl_loss = step.loss;
    loss = bce_loss + q.llcl_weight * llcl_loss;
    active = step.stats.global_batch_size;
    std::vector<at::Tensor> grads;
    for (auto& p : head->parameters())
      grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
    MLCD_RETURN_IF_ERROR(comm.AllReduce(grads, ReduceOp::kSum));
    MLCD_ASSIGN_OR_RETURN(at::Tensor grad_t, GatherRows(comm, t.grad(), B));
    if (rank == 0) {
      size_t i = 0;
      for (auto& p : head->parameters()) p.mutable_grad() = grads[i++];
      std::vector<ExportTensor> named;
      for (const auto& item : head->named_parameters())
        named.push_back({kMulconHeadPrefix + item.key(), item.value().grad().contiguous()});
      MLCD_RETURN_IF_ERROR(MakeDirs(q.out));
      MLCD_RETURN_IF_ERROR(
          WriteHeadSafetensors(q.out + "/grad_head.safetensors", named, MulconHeadMetadata(*head)));
    }
    arrays = {{"grad_tokens", grad_t}};
  }
  if (rank != 0) return Status::Ok();
  MLCD_RETURN_IF_ERROR(MakeDirs(q.out));
  arrays.push_back({"loss", at::scalar_tensor(loss, at::kFloat)});
  if (q.variant == LabelHeadVariant::kMulCon && in.T.defined()) {
    arrays.push_back({"bce_loss", at::scalar_tensor(bce_loss, at::kFloat)});
    arrays.push_back({"llcl_loss", at::scalar_tensor(llcl_loss, at::kFloat)});
  }
  for (const auto& [name, value] : arrays)
    MLCD_RETURN_IF_ERROR(WriteArray(q.out + "/" + name + ".npy", value));
  std::printf(
      "{\"loss\": %.9g, \"bce_loss\": %.9g, \"llcl_loss\": %.9g, \"active_embeddings\": %lld, "
      "\"world_size\": %d, \"variant\": \"%s\", \"out\": \"%s\"}\n",
      loss, bce_loss, llcl_loss, static_cast<long long>(active), world,
      LabelHeadVariantName(q.variant), q.out.c_str());
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace mlcd::worker
