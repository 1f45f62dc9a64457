// The label heads against math (docs/loss.md, "Label heads"): the multi-label BCE and the
// label-level contrastive loss (LLCL) against float64 transcriptions of their definitions,
// the label-attention head's gradients by central differences in float64, the gathered
// losses over 3 ranks (real Gloo groups, one thread per rank, unequal batches) equal to one
// process, the refusal of a bad label on every rank, and the ViT's patch-token accessor.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <set>
#include <vector>

#include "tests/worker_loss/run_ranks.h"
#include "tests/worker_train/small_vit.h"
#include "worker/loss/bce_head.h"
#include "worker/loss/llcl.h"
#include "worker/loss/multilabel_bce.h"
#include "worker/model/label_attention_head.h"
#include "worker/model/vit.h"

namespace mlcd::worker {
namespace {

// Labels of 5 images over L = 4: padding, a repeated label, label 3 carried by image 2 only,
// an image without labels.
at::Tensor BatchLabels() {
  return at::tensor({0, 1, -1, /**/ 1, 1, -1, /**/ 3, 0, 2, /**/ -1, -1, -1, /**/ 2, 0, -1},
                    at::kLong)
      .view({5, 3});
}

std::vector<std::set<int64_t>> Sets(const at::Tensor& labels) {
  std::vector<std::set<int64_t>> sets(static_cast<size_t>(labels.size(0)));
  auto a = labels.accessor<int64_t, 2>();
  for (int64_t i = 0; i < labels.size(0); ++i)
    for (int64_t u = 0; u < labels.size(1); ++u)
      if (a[i][u] >= 0) sets[static_cast<size_t>(i)].insert(a[i][u]);
  return sets;
}

// Eq. 8 in plain loops, float64: the mean over anchors with a positive.
double ReferenceLlcl(const at::Tensor& z_in, const at::Tensor& labels, double tau) {
  const at::Tensor z = z_in.to(at::kDouble);
  const auto sets = Sets(labels);
  struct Row {
    int64_t image, label;
    std::vector<double> v;
  };
  std::vector<Row> active;
  for (int64_t i = 0; i < z.size(0); ++i) {
    for (int64_t j : sets[static_cast<size_t>(i)]) {
      Row r{i, j, {}};
      double norm = 0;
      for (int64_t d = 0; d < z.size(2); ++d) norm += std::pow(z[i][j][d].item<double>(), 2);
      for (int64_t d = 0; d < z.size(2); ++d)
        r.v.push_back(z[i][j][d].item<double>() / std::max(std::sqrt(norm), 1e-12));
      active.push_back(r);
    }
  }
  auto sim = [&](size_t a, size_t b) {
    double s = 0;
    for (size_t d = 0; d < active[a].v.size(); ++d) s += active[a].v[d] * active[b].v[d];
    return s / tau;
  };
  double total = 0;
  int anchors = 0;
  for (size_t a = 0; a < active.size(); ++a) {
    double denominator = 0;
    for (size_t b = 0; b < active.size(); ++b)
      if (b != a) denominator += std::exp(sim(a, b));
    double sum = 0;
    int positives = 0;
    for (size_t b = 0; b < active.size(); ++b) {
      if (b == a || active[b].label != active[a].label) continue;
      sum -= sim(a, b) - std::log(denominator);
      ++positives;
    }
    if (positives == 0) continue;
    total += sum / positives;
    ++anchors;
  }
  return anchors > 0 ? total / anchors : 0.0;
}

// The BCE of the definition, float64 loops: mean over samples and classes.
double ReferenceBce(const at::Tensor& logits, const at::Tensor& labels) {
  const auto sets = Sets(labels);
  const at::Tensor x = logits.to(at::kDouble);
  double total = 0;
  for (int64_t i = 0; i < x.size(0); ++i) {
    for (int64_t c = 0; c < x.size(1); ++c) {
      const double v = x[i][c].item<double>();
      const double p = 1.0 / (1.0 + std::exp(-v));
      total -= sets[static_cast<size_t>(i)].count(c) ? std::log(p) : std::log(1 - p);
    }
  }
  return total / static_cast<double>(x.numel());
}

TEST(LabelHeadsTest, LlclMatchesEquation8AndItsFiniteDifferences) {
  at::manual_seed(3);
  const at::Tensor z = at::randn({5, 4, 3}, at::kDouble);
  const at::Tensor labels = BatchLabels();
  auto comm = Collectives::Local();
  auto step = LlclForwardBackward({0.3}, *comm, z, labels);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_NEAR(step->loss, ReferenceLlcl(z, labels, 0.3), 1e-12);
  // Active embeddings: 2 + 1 + 3 + 0 + 2 = 8; label 3 (image 2) has no positive.
  EXPECT_EQ(step->stats.global_batch_size, 8);
  EXPECT_EQ(step->stats.anchors_with_positives, 7);
  const double h = 1e-6;
  for (int64_t k = 0; k < z.numel(); ++k) {
    at::Tensor zp = z.clone(), zm = z.clone();
    zp.view(-1)[k] += h;
    zm.view(-1)[k] -= h;
    const double fd = (ReferenceLlcl(zp, labels, 0.3) - ReferenceLlcl(zm, labels, 0.3)) / (2 * h);
    EXPECT_NEAR(step->grad_embeddings.view(-1)[k].item<double>(), fd, 1e-7) << "entry " << k;
  }
  // Fewer than two active embeddings: no pair, L = 0.
  auto lone = LlclForwardBackward({0.3}, *comm, z.narrow(0, 1, 1), labels.narrow(0, 1, 1));
  ASSERT_TRUE(lone.ok()) << lone.status().ToString();
  EXPECT_EQ(lone->loss, 0.0);
  EXPECT_EQ(lone->grad_embeddings.abs().sum().item<double>(), 0.0);
}

TEST(LabelHeadsTest, BceMatchesItsDefinitionAndTheHeadsGradient) {
  at::manual_seed(4);
  BceHead head(6, 4);
  head->to(at::kDouble);
  const at::Tensor e = at::randn({5, 6}, at::kDouble);
  const at::Tensor labels = BatchLabels();
  auto comm = Collectives::Local();
  auto r = MultiLabelBce(*comm, head->forward(e), labels);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const at::Tensor logits = head->forward(e).detach();
  EXPECT_NEAR(r->loss, ReferenceBce(logits, labels), 1e-12);
  EXPECT_NEAR(r->local_term.item<double>(), r->loss, 1e-12);
  r->local_term.backward();
  const at::Tensor W = head->named_parameters()["weight"];
  const double h = 1e-6;
  for (int64_t k = 0; k < W.numel(); ++k) {
    at::Tensor wp = W.detach().clone(), wm = W.detach().clone();
    wp.view(-1)[k] += h;
    wm.view(-1)[k] -= h;
    const at::Tensor b = head->named_parameters()["bias"].detach();
    const double fd = (ReferenceBce(at::addmm(b, e, wp.t()), labels) -
                       ReferenceBce(at::addmm(b, e, wm.t()), labels)) /
                      (2 * h);
    EXPECT_NEAR(W.grad().view(-1)[k].item<double>(), fd, 1e-8) << "entry " << k;
  }
  const at::Tensor y = MultiHotTargets(labels, 4, at::kDouble);
  EXPECT_EQ(y.sum().item<double>(), 8.0);  // the repeat counted once, padding none
}

TEST(LabelHeadsTest, LabelAttentionHeadGradientsByFiniteDifferences) {
  LabelAttentionOptions o;
  o.token_dim = 4;
  o.num_labels = 3;
  o.label_dim = 4;
  o.heads = 2;
  o.projection_dim = 3;
  ASSERT_TRUE(ValidateLabelAttentionOptions(o).ok());
  LabelAttentionHead head(o);
  head->ResetParameters(7);
  head->to(at::kDouble);
  at::manual_seed(5);
  const at::Tensor tokens = at::randn({2, 3, 4}, at::kDouble).requires_grad_();
  const at::Tensor a = at::randn({2, 3}, at::kDouble), c = at::randn({2, 3, 3}, at::kDouble);
  auto f = [&](const at::Tensor& t) {
    LabelAttentionOutput out = head->forward(t);
    EXPECT_EQ(out.embeddings.sizes(), (at::IntArrayRef{2, 3, 4}));
    return (out.logits * a).sum() + (head->Project(out.embeddings) * c).sum();
  };
  f(tokens).backward();
  const double h = 1e-6;
  auto check = [&](const std::string& name, at::Tensor p, const at::Tensor& grad) {
    ASSERT_TRUE(grad.defined()) << name;
    double worst = 0;
    for (int64_t k = 0; k < p.numel(); ++k) {
      torch::NoGradGuard no_grad;
      const double saved = p.view(-1)[k].item<double>();
      p.view(-1)[k] = saved + h;
      const double up = f(tokens).item<double>();
      p.view(-1)[k] = saved - h;
      const double down = f(tokens).item<double>();
      p.view(-1)[k] = saved;
      worst = std::max(worst, std::abs((up - down) / (2 * h) - grad.view(-1)[k].item<double>()));
    }
    EXPECT_LT(worst, 1e-7) << name;
  };
  check("tokens", tokens.detach(), tokens.grad());
  for (auto& item : head->named_parameters())
    check(item.key(), item.value().detach(), item.value().grad());
}

TEST(LabelHeadsTest, ThreeRanksEqualOneProcess) {
  at::manual_seed(6);
  const at::Tensor z = at::randn({5, 4, 3}, at::kFloat);
  const at::Tensor e = at::randn({5, 6}, at::kFloat);
  const at::Tensor labels = BatchLabels();
  BceHead head(6, 4);
  auto comm = Collectives::Local();
  auto one_llcl = LlclForwardBackward({0.2}, *comm, z, labels);
  ASSERT_TRUE(one_llcl.ok()) << one_llcl.status().ToString();
  auto one_bce = MultiLabelBce(*comm, head->forward(e), labels);
  ASSERT_TRUE(one_bce.ok()) << one_bce.status().ToString();
  one_bce->local_term.backward();
  const at::Tensor one_grad_w = head->named_parameters()["weight"].grad().clone();
  const std::vector<int64_t> split = {2, 0, 3};
  std::mutex mu;
  std::vector<at::Tensor> grads(3), head_grads(3);
  std::vector<double> llcl(3), bce(3);
  RunRanks(3, [&](int rank, Collectives& c) {
    int64_t begin = 0;
    for (int r = 0; r < rank; ++r) begin += split[static_cast<size_t>(r)];
    const int64_t n = split[static_cast<size_t>(rank)];
    auto step = LlclForwardBackward({0.2}, c, z.narrow(0, begin, n), labels.narrow(0, begin, n));
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    BceHead mine(6, 4);
    auto r = MultiLabelBce(c, mine->forward(e.narrow(0, begin, n)), labels.narrow(0, begin, n));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    r->local_term.backward();
    std::lock_guard<std::mutex> lock(mu);
    grads[static_cast<size_t>(rank)] = step->grad_embeddings;
    llcl[static_cast<size_t>(rank)] = step->loss;
    bce[static_cast<size_t>(rank)] = r->loss;
    head_grads[static_cast<size_t>(rank)] = mine->named_parameters()["weight"].grad().clone();
  });
  if (HasFailure()) return;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NEAR(llcl[static_cast<size_t>(r)], one_llcl->loss, 1e-5 * std::abs(one_llcl->loss));
    EXPECT_NEAR(bce[static_cast<size_t>(r)], one_bce->loss, 1e-6);
  }
  const double scale = one_llcl->grad_embeddings.abs().max().item<double>();
  EXPECT_LT((at::cat(grads, 0) - one_llcl->grad_embeddings).abs().max().item<double>(),
            1e-5 * scale);
  // The ranks' head gradients sum to the one process's (the trainer's all-reduce).
  const at::Tensor summed = head_grads[0] + head_grads[1] + head_grads[2];
  EXPECT_LT((summed - one_grad_w).abs().max().item<double>(), 1e-6);
}

TEST(LabelHeadsTest, ALabelOutsideTheHeadIsRefusedOnEveryRank) {
  std::mutex mu;
  int bce_refused = 0, llcl_refused = 0;
  RunRanks(3, [&](int rank, Collectives& c) {
    const at::Tensor labels = at::full({2, 1}, rank == 1 ? 4 : 1, at::kLong);
    auto r = MultiLabelBce(c, at::zeros({2, 4}), labels);
    auto s = LlclForwardBackward({0.2}, c, at::randn({2, 4, 3}), labels);
    std::lock_guard<std::mutex> lock(mu);
    if (!r.ok() && r.status().code() == StatusCode::kInvalidArgument) {
      ++bce_refused;
      if (rank == 1) {
        EXPECT_NE(std::string(r.status().message()).find("label 4 is >= the number of classes 4"),
                  std::string::npos)
            << r.status().ToString();
      }
    }
    if (!s.ok() && s.status().code() == StatusCode::kInvalidArgument) ++llcl_refused;
  });
  EXPECT_EQ(bce_refused, 3);
  EXPECT_EQ(llcl_refused, 3);
}

TEST(LabelHeadsTest, PatchTokensComeFromForwardsPass) {
  for (VitPooling pooling : {VitPooling::kCls, VitPooling::kMean}) {
    VisionTransformer vit(SmallTestVit(pooling));
    torch::NoGradGuard no_grad;
    const at::Tensor images = at::randn({2, 1, 28, 28});
    at::Tensor tokens;
    at::Tensor e;
    vit->Features(images, VitFeatures::kEmbedding, 4, &e, &tokens);
    EXPECT_LT((e - vit->forward(images)).abs().max().item<double>(), 1e-5);
    const VitOptions& o = vit->options();
    ASSERT_EQ(tokens.sizes(), (at::IntArrayRef{2, o.num_patches(), o.width}));
    // Features(kTokens): every token through the final LayerNorm, normalised, / sqrt(T).
    const at::Tensor all =
        vit->Features(images, VitFeatures::kTokens).view({2, o.tokens(), o.width});
    const at::Tensor expected = all.narrow(1, o.tokens() - o.num_patches(), o.num_patches());
    const at::Tensor mine = tokens / tokens.norm(2, {2}, true) / std::sqrt(double(o.tokens()));
    EXPECT_LT((mine - expected).abs().max().item<double>(), 1e-5);
  }
}

}  // namespace
}  // namespace mlcd::worker
