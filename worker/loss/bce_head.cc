#include "worker/loss/bce_head.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace mlcd::worker {

BceHeadImpl::BceHeadImpl(int64_t embedding_dim, int64_t num_classes) {
  TORCH_CHECK(embedding_dim >= 1 && num_classes >= 1, "BceHead needs D >= 1 and K >= 1, got ",
              embedding_dim, " and ", num_classes);
  weight_ = register_parameter("weight", torch::empty({num_classes, embedding_dim}));
  bias_ = register_parameter("bias", torch::zeros({num_classes}));
  ResetParameters(0);
}

torch::Tensor BceHeadImpl::forward(const torch::Tensor& embeddings) {
  return torch::addmm(bias_, embeddings, weight_.t());
}

void BceHeadImpl::ResetParameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight_.size(1)));
  weight_.copy_(at::empty(weight_.sizes(), at::kFloat).uniform_(-bound, bound, gen));
  bias_.zero_();
}

}  // namespace mlcd::worker
