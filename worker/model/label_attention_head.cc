#include "worker/model/label_attention_head.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <string>

namespace mlcd::worker {
namespace {

constexpr double kHeadLayerNormEps = 1e-5;

torch::nn::Linear MakeLinear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
}

torch::nn::LayerNorm MakeLayerNorm(int64_t size) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({size}).eps(kHeadLayerNormEps));
}

}  // namespace

Status ValidateLabelAttentionOptions(const LabelAttentionOptions& o) {
  auto positive = [](const char* name, int64_t v) {
    return v >= 1 ? Status::Ok()
                  : Status::InvalidArgument(std::string(name) + " must be >= 1, got " +
                                            std::to_string(v));
  };
  MLCD_RETURN_IF_ERROR(positive("token dimension (the backbone's width)", o.token_dim));
  MLCD_RETURN_IF_ERROR(positive("number of labels", o.num_labels));
  MLCD_RETURN_IF_ERROR(positive("label_dim", o.label_dim));
  MLCD_RETURN_IF_ERROR(positive("heads", o.heads));
  MLCD_RETURN_IF_ERROR(positive("projection_dim", o.projection_dim));
  if (o.token_dim % o.heads != 0 || o.label_dim % o.heads != 0) {
    return Status::InvalidArgument(
        "heads (" + std::to_string(o.heads) + ") must divide the backbone's width (" +
        std::to_string(o.token_dim) + ") and label_dim (" + std::to_string(o.label_dim) + ")");
  }
  return Status::Ok();
}

AttentionBlockImpl::AttentionBlockImpl(int64_t query_dim, int64_t key_dim, int64_t out_dim,
                                       int64_t heads)
    : heads_(heads) {
  query_ = register_module("query", MakeLinear(query_dim, out_dim));
  key_ = register_module("key", MakeLinear(key_dim, out_dim));
  value_ = register_module("value", MakeLinear(key_dim, out_dim));
  output_ = register_module("output", MakeLinear(out_dim, out_dim));
  feedforward_ = register_module("feedforward", MakeLinear(out_dim, out_dim));
  norm1_ = register_module("norm1", MakeLayerNorm(out_dim));
  norm2_ = register_module("norm2", MakeLayerNorm(out_dim));
}

torch::Tensor AttentionBlockImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys) {
  const int64_t b = queries.size(0), nq = queries.size(1), nk = keys.size(1);
  const torch::Tensor q = query_->forward(queries);  // [b, nq, d]
  const int64_t d = q.size(2), dh = d / heads_;
  auto split = [&](const torch::Tensor& x, int64_t n) {  // [b, n, d] -> [b, h, n, dh]
    return x.view({b, n, heads_, dh}).transpose(1, 2);
  };
  const torch::Tensor k = split(key_->forward(keys), nk);
  const torch::Tensor v = split(value_->forward(keys), nk);
  const torch::Tensor scores =
      torch::matmul(split(q, nq), k.transpose(2, 3)) / std::sqrt(static_cast<double>(dh));
  const torch::Tensor heads =
      torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, nq, d});
  const torch::Tensor first = norm1_->forward(q + output_->forward(heads));
  return norm2_->forward(first + torch::relu(feedforward_->forward(first)));
}

LabelAttentionHeadImpl::LabelAttentionHeadImpl(const LabelAttentionOptions& options)
    : options_(options) {
  const int64_t C = options.token_dim, L = options.num_labels, D = options.label_dim;
  label_embeddings_ = register_parameter("label_embeddings", torch::empty({L, C}));
  classifier_weight_ = register_parameter("classifier_weight", torch::empty({L, D}));
  classifier_bias_ = register_parameter("classifier_bias", torch::zeros({L}));
  token_attention_ = register_module("token_attention", AttentionBlock(C, C, C, options.heads));
  label_attention_ = register_module("label_attention", AttentionBlock(C, C, D, options.heads));
  label_self_attention_ =
      register_module("label_self_attention", AttentionBlock(D, D, D, options.heads));
  projector_hidden_ = register_module("projector_hidden", MakeLinear(D, D));
  projector_out_ = register_module("projector_out", MakeLinear(D, options.projection_dim));
  ResetParameters(0);
}

LabelAttentionOutput LabelAttentionHeadImpl::forward(const torch::Tensor& tokens) {
  const int64_t b = tokens.size(0);
  const torch::Tensor r = token_attention_->forward(tokens, tokens);
  const torch::Tensor u = label_embeddings_.unsqueeze(0).expand({b, -1, -1});
  torch::Tensor g = label_attention_->forward(u, r);
  g = label_self_attention_->forward(g, g);
  LabelAttentionOutput out;
  out.logits = (g * classifier_weight_).sum(-1) + classifier_bias_;
  out.embeddings = g;
  return out;
}

torch::Tensor LabelAttentionHeadImpl::Project(const torch::Tensor& embeddings) {
  return projector_out_->forward(torch::relu(projector_hidden_->forward(embeddings)));
}

void LabelAttentionHeadImpl::ResetParameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // named_parameters() has a fixed order, so the draws are the same on every rank.
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool norm = name.find("norm") != std::string::npos;
    if (p.dim() == 2) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.size(1)));
      p.copy_(at::empty(p.sizes(), at::kFloat).uniform_(-bound, bound, gen));
    } else if (norm && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
      p.fill_(1.0);
    } else {
      p.zero_();
    }
  }
}

}  // namespace mlcd::worker
