// The label heads' part of `mlcd-worker loss-check` (docs/loss.md, "Label heads"): the `bce`
// and `mulcon` losses and their gradients on given inputs, at a given world size, so that an
// outside implementation can be compared with ours.
//
//   bce     --embeddings E.npy [B, D] --labels Y.npy [B, l] --weights W.npy [K, D]
//           [--bias b.npy [K]]      (zero bias without it)
//           writes loss.npy, grad_embeddings.npy [B, D], grad_weights.npy [K, D],
//           grad_bias.npy [K]
//   mulcon  --embeddings Z.npy [B, L, d_z] --labels Y.npy: the label-level contrastive loss
//           alone on given projected embeddings (worker/loss/llcl.h, --temperature τ);
//           writes loss.npy, grad_embeddings.npy [B, L, d_z]
//   mulcon  --tokens T.npy [B, P, C] --labels Y.npy --head H.safetensors: the whole head
//           (worker/model/label_attention_head.h; H holds its mulcon_head.* tensors and the
//           "mulcon_head.heads" metadata, as the export writes them), L = BCE + γ·LLCL with
//           γ = --llcl-weight (0: BCE alone, MulCon's first step); writes loss.npy,
//           bce_loss.npy, llcl_loss.npy, grad_tokens.npy [B, P, C] and grad_head.safetensors
//           (dL/dθ under the parameters' own names)
// Everything float32 (.npy float32 in; labels int64 or int32, < 0 padding). With world size
// N, rank ρ holds images [floor(Bρ/N), floor(B(ρ+1)/N)) and the losses are gathered; rank 0
// writes the outputs, which equal one process's up to float32 summation order.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "common/enums.h"
#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/model/safetensors.h"

namespace mlcd::worker {

// The flags of one check (paths empty when not given).
struct LabelHeadCheckRequest {
  LabelHeadVariant variant = LabelHeadVariant::kBce;
  std::string embeddings, tokens, labels, weights, bias, head, out;
  double temperature = 0.2;  // τ of the LLCL
  double llcl_weight = 0.1;  // γ
};

struct LabelHeadCheckInputs {
  at::Tensor E, T, Y, W, b;  // as above; undefined when not used
  SafetensorsFile head;      // --head
};

// A .npy array as a tensor: float32 (want_float) or int64/int32 (read as int64), with
// min_dim..max_dim dimensions. INVALID_ARGUMENT naming `flag`, the file and the problem.
StatusOr<at::Tensor> ReadCheckArray(const std::string& flag, const std::string& path,
                                    bool want_float, int min_dim, int max_dim);

// Reads and checks every input: INVALID_ARGUMENT naming the flag and the problem (missing,
// malformed, wrong shapes, non-finite values, labels outside the classes, flags of the other
// forms given).
StatusOr<LabelHeadCheckInputs> ReadLabelHeadCheckInputs(const LabelHeadCheckRequest& request);

// This rank's part (every rank of `comm`); rank 0 writes request.out and prints one JSON line.
Status RunLabelHeadCheckRank(const LabelHeadCheckRequest& request,
                             const LabelHeadCheckInputs& inputs, Collectives& comm);

}  // namespace mlcd::worker
