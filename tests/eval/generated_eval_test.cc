// The evaluation of generated datasets (`mlcdctl dataset make`, docs/data.md): a tiny
// Trifeature scores each attribute with its own probe, a tiny set of Fashion mosaics (label
// sets, no single class) runs the multi-label protocol, both for a random-init ViT with the
// random-init and raw-pixel baselines beside it, through the real WebDataset shards and index.
#include <gtest/gtest.h>

#include "common/spec_defaults.h"
#include "tests/eval/make_generated.h"
#include "tests/testing/process.h"
#include "worker/eval/baselines.h"
#include "worker/eval/runner.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

// A random-init ViT of width 32, depth 1 on the generated dataset in `dir`.
EvaluationOptions TinyEvaluation(const std::string& dir, int image_size, int channels) {
  EvaluationOptions o;
  o.has_spec = true;
  v1::DatasetSpec* d = o.spec.mutable_dataset();
  d->set_format("webdataset");
  d->set_index(dir + "/train-index");
  d->set_test_index(dir + "/test-index");
  d->set_resize_size(image_size);
  v1::ModelSpec* m = o.spec.mutable_model();
  m->set_image_size(image_size);
  m->set_channels(channels);
  m->set_patch_size(image_size / 4);
  m->set_width(32);
  m->set_depth(1);
  m->set_heads(2);
  m->set_embed_dim(32);
  o.spec.mutable_training()->set_seed(3);
  o.spec.mutable_evaluation()->set_knn_k(5);
  o.batch_size = 32;
  o.probe.fixed_lambda = 0.1;  // no λ search: the protocol's plumbing is under test here
  return o;
}

TEST(GeneratedEvalTest, TrifeatureProbesEveryAttributeBesideTheBaselines) {
  testing::TempDir dir;
  ASSERT_TRUE(
      testing::MakeGenerated(GeneratedKind::kTrifeature, dir.Sub("tri"), 1, 80, 40, 24).ok());
  EvaluationOptions o = TinyEvaluation(dir.Sub("tri"), 24, 3);
  auto r = RunEvaluation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const v1::EvaluationResult& e = r->result;
  EXPECT_FALSE(e.has_multi_label());
  ASSERT_EQ(e.attributes_size(), 3);
  EXPECT_EQ(e.attributes(0).name(), "shape");
  EXPECT_EQ(e.attributes(1).name(), "texture");
  EXPECT_EQ(e.attributes(2).name(), "colour");
  for (const auto& a : e.attributes()) {
    EXPECT_EQ(a.num_classes(), 10);
    EXPECT_GE(a.linear_probe_accuracy(), 0);
    EXPECT_LE(a.linear_probe_accuracy(), 1);
  }
  // The class labels are the shape: the single-label probe is the shape probe.
  EXPECT_DOUBLE_EQ(e.linear_probe_accuracy(), e.attributes(0).linear_probe_accuracy());

  auto baselines = RunBaselines(o, "");
  ASSERT_TRUE(baselines.ok()) << baselines.status().ToString();
  ASSERT_EQ(baselines->size(), 2u);
  for (const auto& b : *baselines) {
    ASSERT_EQ(b.attributes_size(), 3) << b.name();
    EXPECT_EQ(b.attributes(2).name(), "colour");
  }
  // Colour is a per-image mean away in raw pixels: the pixel probe finds it well above the
  // 10 % of chance even on 80 images.
  EXPECT_GT((*baselines)[1].attributes(2).linear_probe_accuracy(), 0.3);
  // The random-init baseline is this very evaluation (same seed, same features).
  EXPECT_DOUBLE_EQ((*baselines)[0].attributes(1).linear_probe_accuracy(),
                   e.attributes(1).linear_probe_accuracy());
}

TEST(GeneratedEvalTest, FashionMosaicsRunTheMultiLabelProtocol) {
  testing::TempDir dir;
  ASSERT_TRUE(
      testing::MakeGenerated(GeneratedKind::kFashionMosaic, dir.Sub("mosaics"), 2, 120, 60, 0)
          .ok());
  EvaluationOptions o = TinyEvaluation(dir.Sub("mosaics"), 56, 1);
  o.spec.mutable_dataset()->add_mean(0.2860);
  o.spec.mutable_dataset()->add_stddev(0.3530);
  // A multi-label head that knows the answer, but for label 0 of test sample 0.
  o.predict_test_labels = [](const EmbeddingModel&,
                             const ImageDataset& test) -> StatusOr<std::vector<double>> {
    const LabelSets& sets = test.annotations().labels;
    const int64_t L = sets.num_labels;
    std::vector<double> z(static_cast<size_t>(test.size() * L), -1.0);
    for (int64_t i = 0; i < test.size(); ++i)
      for (int64_t k = 0; k < sets.count(i); ++k) z[i * L + sets.begin(i)[k]] = 1.0;
    z[0] = -z[0];
    return z;
  };
  auto r = RunEvaluation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const v1::EvaluationResult& e = r->result;
  ASSERT_TRUE(e.has_multi_label());
  EXPECT_EQ(e.multi_label().num_labels(), 10);
  EXPECT_GT(e.multi_label().mean_average_precision(), 0);
  EXPECT_EQ(e.attributes_size(), 0);
  EXPECT_TRUE(r->details.contains("single_label_skipped"));  // mosaics have no single class
  ASSERT_TRUE(e.has_model_predictions());
  EXPECT_DOUBLE_EQ(e.model_predictions().hamming_accuracy(), 1.0 - 1.0 / (60 * 10));

  auto baselines = RunBaselines(o, "");
  ASSERT_TRUE(baselines.ok()) << baselines.status().ToString();
  for (const auto& b : *baselines) {
    ASSERT_TRUE(b.has_multi_label()) << b.name();
    EXPECT_EQ(b.multi_label().num_labels(), 10);
  }
  // The pixels show which items a mosaic holds better than chance: a label's AP is about its
  // frequency (0.34) for random scores.
  EXPECT_GT((*baselines)[1].multi_label().mean_average_precision(), 0.5);
}

}  // namespace
}  // namespace mlcd::worker
