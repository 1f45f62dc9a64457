// The evaluation of a dataset's annotations: reading them from a dataset (label sets and
// attributes, cut to a limited split, splits that disagree refused), and RunEvaluation on
// features whose rows carry label sets and attributes: the multi-label protocol and the
// attribute probes land in EvaluationResult beside (or instead of) the single-label probe,
// each switch turns its part off, and a model's own label logits are scored by the hook.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "tests/testing/process.h"
#include "worker/eval/annotation_eval.h"
#include "worker/eval/runner.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

// An in-memory dataset with annotations (what an annotated WebDataset hands out).
class AnnotatedDataset : public InMemoryImageDataset {
 public:
  AnnotatedDataset(int64_t n, DatasetAnnotations annotations)
      : InMemoryImageDataset("annotated", n, 1, 2, 2, std::vector<uint8_t>(n * 4, 0), {}, {0.5f},
                             {0.5f}),
        annotations_(std::move(annotations)) {}
  const DatasetAnnotations& annotations() const override { return annotations_; }

 private:
  DatasetAnnotations annotations_;
};

DatasetAnnotations MakeAnnotations(int64_t n, int num_labels, int shape_classes) {
  DatasetAnnotations a;
  a.labels.num_labels = num_labels;
  a.labels.offsets.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < num_labels; ++j)
      if ((i + j) % 3 == 0) a.labels.ids.push_back(j);
    a.labels.offsets.push_back(static_cast<int64_t>(a.labels.ids.size()));
  }
  Attribute shape;
  shape.name = "shape";
  shape.num_classes = shape_classes;
  for (int64_t i = 0; i < n; ++i) shape.values.push_back(static_cast<int32_t>(i % shape_classes));
  a.attributes.push_back(shape);
  return a;
}

TEST(AnnotationEvalTest, ReadsTheDatasetsAnnotationsCutToTheSplit) {
  // Annotations of 6 samples on a split opened with 4 images.
  AnnotatedDataset train(4, MakeAnnotations(6, 3, 2)), test(3, MakeAnnotations(3, 3, 2));
  auto a = AnnotationsOf(train, test);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->train.label_sets.rows, 4);
  EXPECT_EQ(a->train.label_sets.cols, 3);
  // Sample 1 carries label 2 ((1 + 2) % 3 == 0), sample 3 label 0.
  EXPECT_EQ(a->train.label_sets.values, (std::vector<uint8_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0}));
  ASSERT_EQ(a->train.attributes.size(), 1u);
  EXPECT_EQ(a->train.attributes[0].name, "shape");
  EXPECT_EQ(a->train.attributes[0].values, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(a->test.label_sets.rows, 3);

  AnnotatedDataset other_labels(3, MakeAnnotations(3, 4, 2));
  auto labels = AnnotationsOf(train, other_labels);
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find("3 and 4 labels"), std::string::npos)
      << labels.status().ToString();
  AnnotatedDataset other_shapes(3, MakeAnnotations(3, 3, 5));
  auto shapes = AnnotationsOf(train, other_shapes);
  ASSERT_FALSE(shapes.ok());
  EXPECT_NE(shapes.status().message().find("different attributes"), std::string::npos);
  AnnotatedDataset too_few(8, MakeAnnotations(6, 3, 2));
  EXPECT_EQ(AnnotationsOf(too_few, test).status().code(), StatusCode::kInvalidArgument);

  InMemoryImageDataset plain("plain", 2, 1, 2, 2, std::vector<uint8_t>(8, 0), {0, 1}, {0.5f},
                             {0.5f});
  auto none = AnnotationsOf(plain, plain);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// n rows of features carrying 3 labels (one direction each) and a 2-class attribute "size"
// (its own direction); class labels = the attribute when `with_classes`.
void WriteSplit(const testing::TempDir& dir, const std::string& name, int64_t n, uint64_t seed,
                bool with_classes, SplitAnnotations* out) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 0.2);
  FeatureMatrix x(n, 5);
  out->label_sets = LabelMatrix(n, 3);
  SplitAttribute size{"size", 2, {}};
  std::vector<int64_t> ids, classes;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j)
      if (rng() % 2) out->label_sets.set(i, j);
    size.values.push_back(static_cast<int64_t>(rng() % 2));
    for (int k = 0; k < 5; ++k) {
      double v = 0.2 + g(rng);
      if (k < 3) v += 1.5 * out->label_sets.at(i, k);
      if (k == 3) v += 1.5 * static_cast<double>(size.values.back());
      x.row(i)[k] = static_cast<float>(v);
    }
    ids.push_back(i);
  }
  classes = size.values;
  out->attributes = {size};
  ASSERT_TRUE(
      WriteEmbeddingShard(dir.Sub(name), 0, 1, x, ids, with_classes ? &classes : nullptr).ok());
}

// The evaluation of both splits written by WriteSplit (seeds `seed` and seed + 1), with their
// annotations in *annotations.
EvaluationOptions AnnotatedFeatures(const testing::TempDir& dir, int64_t train, int64_t test,
                                    uint64_t seed, bool with_classes,
                                    const std::shared_ptr<EvalAnnotations>& annotations) {
  WriteSplit(dir, "train", train, seed, with_classes, &annotations->train);
  WriteSplit(dir, "test", test, seed + 1, with_classes, &annotations->test);
  EvaluationOptions o;
  o.train_features = {dir.Sub("train")};
  o.test_features = {dir.Sub("test")};
  o.annotations = annotations;
  return o;
}

TEST(AnnotationEvalTest, RunEvaluationScoresLabelSetsAndAttributes) {
  testing::TempDir dir;
  auto annotations = std::make_shared<EvalAnnotations>();
  EvaluationOptions o = AnnotatedFeatures(dir, 60, 30, 1, false, annotations);
  auto r = RunEvaluation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const v1::EvaluationResult& e = r->result;
  ASSERT_TRUE(e.has_multi_label());
  EXPECT_GT(e.multi_label().mean_average_precision(), 0.95);
  EXPECT_GT(e.multi_label().example_f1(), 0.9);
  EXPECT_EQ(e.multi_label().num_labels(), 3);
  EXPECT_EQ(e.multi_label().threshold(), 0.5);
  ASSERT_EQ(e.attributes_size(), 1);
  EXPECT_EQ(e.attributes(0).name(), "size");
  EXPECT_GT(e.attributes(0).linear_probe_accuracy(), 0.9);
  // No class labels: no single-label probe or kNN, and it says so.
  EXPECT_EQ(e.linear_probe_accuracy(), 0);
  EXPECT_TRUE(r->details.contains("single_label_skipped"));
  EXPECT_FALSE(e.has_model_predictions());

  // The limits cut the annotations with the rows; the switches turn each part off.
  o.test_limit = 10;
  o.run_attributes = 0;
  r = RunEvaluation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->result.test_samples(), 10u);
  EXPECT_TRUE(r->result.has_multi_label());
  EXPECT_EQ(r->result.attributes_size(), 0);
  o.run_attributes = -1;
  o.run_multi_label = 0;
  r = RunEvaluation(o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->result.has_multi_label());
  EXPECT_EQ(r->result.attributes_size(), 1);

  // Without annotations and without class labels there is nothing to score.
  o.annotations = nullptr;
  EXPECT_FALSE(RunEvaluation(o).ok());
}

TEST(AnnotationEvalTest, ModelPredictionsHookAndSingleLabelSideBySide) {
  testing::TempDir dir;
  auto annotations = std::make_shared<EvalAnnotations>();
  EvaluationOptions o = AnnotatedFeatures(dir, 40, 20, 3, true, annotations);
  // A "head" that predicts the test labels exactly, but for label 1 of sample 0.
  const LabelMatrix& y = annotations->test.label_sets;
  for (size_t k = 0; k < y.values.size(); ++k) o.model_test_logits.push_back(y.values[k] ? 3 : -3);
  o.model_test_logits[1] = y.at(0, 1) ? -3 : 3;
  auto r = RunEvaluation(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->result.linear_probe_accuracy(), 0.9);  // the class labels are "size"
  EXPECT_GT(r->result.knn_accuracy(), 0.6);           // chance: 0.5
  ASSERT_TRUE(r->result.has_model_predictions());
  auto expected = ScoreMultiLabel(o.model_test_logits, y);
  ASSERT_TRUE(expected.ok());
  EXPECT_DOUBLE_EQ(r->result.model_predictions().hamming_accuracy(), expected->hamming_accuracy);
  EXPECT_DOUBLE_EQ(r->result.model_predictions().hamming_accuracy(), 1.0 - 1.0 / 60);
  EXPECT_DOUBLE_EQ(r->result.model_predictions().micro_f1(), expected->micro_f1);
  EXPECT_EQ(r->result.model_predictions().median_lambda(), 0);
  o.model_test_logits.pop_back();
  auto bad = RunEvaluation(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("model's label predictions"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace mlcd::worker
