// The `bce` objective's head: a linear layer from the backbone's embedding to K class logits,
// trained with the multi-label BCE of worker/loss/multilabel_bce.h (docs/loss.md, "Label
// heads"). The image-level baseline both the MulSupCon and the MulCon papers compare with.
//
//   x_i = W e_i + b          W [K, D], b [K]; e_i the embedding as the backbone returns it
//                            (not normalised)
//   L   = MultiLabelBce(x, labels)          mean over the global batch's samples and classes
//
// Usage (every rank, same order):
//   torch::Tensor e = backbone->forward(images);
//   MLCD_ASSIGN_OR_RETURN(MultiLabelBceResult r, MultiLabelBce(comm, head->forward(e), labels));
//   r.local_term.backward();   // then all-reduce (sum) the backbone's and the head's gradients
//
// Exported to safetensors as "bce_head.weight" [K, D] and "bce_head.bias" [K]
// (docs/export.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace mlcd::worker {

class BceHeadImpl : public torch::nn::Module {
 public:
  // embedding_dim D, num_classes K, both >= 1. Parameters "weight" and "bias", float32 on the
  // CPU, initialised by ResetParameters(0).
  BceHeadImpl(int64_t embedding_dim, int64_t num_classes);

  // embeddings [n, D] -> logits [n, K].
  torch::Tensor forward(const torch::Tensor& embeddings);

  // W uniform in ±1/sqrt(D) (as torch.nn.Linear), b = 0, from a generator seeded with `seed`
  // alone, so every rank starts from the same head.
  void ResetParameters(uint64_t seed);

  int64_t embedding_dim() const { return weight_.size(1); }
  int64_t num_classes() const { return weight_.size(0); }

 private:
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(BceHead);

}  // namespace mlcd::worker
