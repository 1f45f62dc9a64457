// `mlcd-worker train` with the contrastive variants as real processes (Gloo over loopback, a
// real mlcd-labelstore with labels from real FAISS k-means of Fashion-MNIST pixels): every
// variant trains with a finite loss that falls on average, 2 ranks give the losses of 1 (the
// gathered global batch and the summed gradients are the same), infonce needs no label set and
// the others refuse to run without one, a resumed run ends with the parameters of an
// uninterrupted one (the projection head and its moments included), and the spec refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "tests/worker_train/train_testing.h"

namespace mlcd::worker {
namespace {

using mlcd::testing::TempDir;
using nlohmann::json;

class ContrastiveTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    store_ = new train_testing::LabelStoreProcess();
    Status st = store_->Start(*dir_);
    ASSERT_TRUE(st.ok()) << st.ToString() << store_->process().Log();
    st = train_testing::WriteKMeansLabelSet(store_->address(), "con/r0", 96, 8, 2);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static void TearDownTestSuite() {
    delete store_;
    delete dir_;
  }

  // 96 images, 16 per global batch (32 views): 6 steps per epoch, `epochs` epochs.
  static v1::JobSpec Spec(const std::string& variant, int epochs = 2) {
    v1::JobSpec spec = train_testing::TinySpec(96, 8, 2, 16, epochs);
    spec.mutable_optimizer()->set_lr(5e-3);
    spec.mutable_loss()->set_variant(variant);
    spec.mutable_loss()->set_temperature(0.5);
    spec.mutable_loss()->set_projection_dim(16);
    spec.mutable_loss()->set_projection_hidden_dim(32);
    spec.mutable_dataset()->set_crop_min_scale(0.5);
    spec.mutable_dataset()->set_color_jitter_prob(0.8);
    spec.mutable_dataset()->set_jitter_brightness(0.4);
    spec.mutable_dataset()->set_jitter_contrast(0.4);
    return spec;
  }
  std::string SpecFile(const std::string& name, const v1::JobSpec& spec) {
    const std::string path = dir_->Sub(name + ".spec.json");
    EXPECT_TRUE(train_testing::WriteSpecJson(path, spec).ok());
    return path;
  }
  // The arguments of a run: the spec, the label set unless `labels` is false, `extra`.
  std::vector<std::string> Args(const std::string& spec, bool labels,
                                std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"--spec", spec, "--log-every", "1"};
    if (labels) a.insert(a.end(), {"--labelstore", store_->address(), "--label-set", "con/r0"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::vector<json> Progress(const std::string& name, int rank = 0) {
    return train_testing::EventsOf(
        train_testing::ReadEvents(dir_->Sub(name) + ".r" + std::to_string(rank) + ".jsonl"),
        "progress");
  }

  static TempDir* dir_;
  static train_testing::LabelStoreProcess* store_;
};
TempDir* ContrastiveTrainTest::dir_ = nullptr;
train_testing::LabelStoreProcess* ContrastiveTrainTest::store_ = nullptr;

double MeanLoss(const std::vector<json>& events, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += events[i]["loss"].get<double>();
  return s / static_cast<double>(end - begin);
}

TEST_F(ContrastiveTrainTest, EveryVariantTrainsAndTwoRanksGiveTheLossesOfOne) {
  for (const std::string variant : {"infonce", "mulsupcon", "supcon-all", "supcon-any"}) {
    SCOPED_TRACE(variant);
    const bool labels = variant != "infonce";
    const std::string spec = SpecFile(variant, Spec(variant, 3));
    for (int world : {1, 2}) {
      const std::string name = variant + ".w" + std::to_string(world);
      Status st = train_testing::RunTrainGang(Args(spec, labels), world, dir_->Sub(name));
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    const auto one = Progress(variant + ".w1"), two = Progress(variant + ".w2");
    ASSERT_EQ(one.size(), 18u);
    ASSERT_EQ(two.size(), 18u);
    std::string losses;
    for (size_t i = 0; i < one.size(); ++i) {
      const double loss = one[i]["loss"].get<double>();
      losses += " " + std::to_string(loss);
      ASSERT_TRUE(std::isfinite(loss)) << "step " << i;
      EXPECT_NEAR(two[i]["loss"].get<double>(), loss, 2e-4 * std::max(1.0, loss)) << "step " << i;
      EXPECT_EQ(two[i]["mean_positives"], one[i]["mean_positives"]) << "step " << i;
      // Every anchor has its other view: infonce exactly that one, the others at least it.
      const double positives = one[i]["mean_positives"].get<double>();
      if (variant == "infonce") {
        EXPECT_EQ(positives, 1.0);
      }
      if (variant != "mulsupcon") {
        EXPECT_EQ(one[i]["anchors_without_positives"], 0);
      }
      EXPECT_GE(positives, variant == "mulsupcon" ? 0.0 : 1.0);
      EXPECT_FALSE(one[i].contains("mean_positive_cosine"));
    }
    EXPECT_LT(MeanLoss(one, 14, 18), MeanLoss(one, 0, 4))
        << "the loss did not fall on average:" << losses;
  }
}

TEST_F(ContrastiveTrainTest, LabelSetRequiredExceptForInfoNce) {
  const std::string spec = SpecFile("nolabels", Spec("supcon-any"));
  std::string out;
  const int rc =
      mlcd::testing::RunCommand(mlcd::testing::BinPath("mlcd-worker"),
                                {"train", "--spec", spec, "--progress-jsonl", "-"}, &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("no label set"), std::string::npos) << out;
  EXPECT_NE(out.find("only infonce needs none"), std::string::npos) << out;
}

// 2 ranks with checkpoints every 2 steps, resumed from the one after step 4 by a new gang: the
// rest of the losses and the final backbone, projection head and their AdamW moments are those
// of the uninterrupted run.
TEST_F(ContrastiveTrainTest, ResumeEndsWithTheParametersOfAnUninterruptedRun) {
  v1::JobSpec s = Spec("mulsupcon");
  s.mutable_training()->set_checkpoint_every_steps(2);
  const std::string spec = SpecFile("resume", s);
  const std::string full = dir_->Sub("resume.full.ckpt"), part = dir_->Sub("resume.part.ckpt");
  Status st = train_testing::RunTrainGang(
      Args(spec, true, {"--checkpoint-dir", full, "--keep-checkpoints", "0"}), 2,
      dir_->Sub("resume.full"));
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = train_testing::RunTrainGang(
      Args(spec, true, {"--checkpoint-dir", part, "--resume", full + "/ckpt-r0-e0-s4"}), 2,
      dir_->Sub("resume.part"));
  ASSERT_TRUE(st.ok()) << st.ToString();
  const auto a = Progress("resume.full"), b = Progress("resume.part");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i + 4]["loss"].get<double>(), 1e-6) << i;
  }
  const std::string last = "/ckpt-r0-e1-s6/";
  for (const char* file :
       {"backbone.weights.npy", "backbone.exp_avg.npy", "projection_head.weights.npy",
        "projection_head.exp_avg.npy", "projection_head.exp_avg_sq.npy"}) {
    auto x = MappedNpy::Open(full + last + file);
    auto y = MappedNpy::Open(part + last + file);
    ASSERT_TRUE(x.ok() && y.ok()) << file;
    ASSERT_EQ(x->header().shape, y->header().shape) << file;
    double worst = 0;
    for (int64_t i = 0; i < x->header().shape[0]; ++i) {
      worst = std::max<double>(worst, std::abs(x->data_as<float>()[i] - y->data_as<float>()[i]));
    }
    EXPECT_LE(worst, 1e-7) << file;
  }
  const std::string head = ReadFileToString(part + last + "projection_head.json").value();
  EXPECT_NE(head.find("\"optimizer_step\": 12"), std::string::npos) << head;
}

// Spec refusals: each names its field.
TEST(ContrastiveSpecTest, RefusalsNameTheField) {
  auto problems = [](const std::function<void(v1::JobSpec*)>& change) {
    v1::JobSpec spec = train_testing::TinySpec(96, 8, 2, 16, 1);
    spec.mutable_loss()->set_variant("infonce");
    change(&spec);
    ApplyJobSpecDefaults(&spec);
    return ValidateJobSpec(&spec);
  };
  EXPECT_TRUE(problems([](v1::JobSpec*) {}).ok());
  const std::vector<std::pair<std::function<void(v1::JobSpec*)>, std::string>> cases = {
      {[](v1::JobSpec* s) { s->mutable_loss()->set_temperature(-0.5); }, "loss.temperature"},
      {[](v1::JobSpec* s) { s->mutable_loss()->set_temperature(NAN); }, "loss.temperature"},
      {[](v1::JobSpec* s) { s->mutable_loss()->set_queue_size(4096); }, "not built"},
      {[](v1::JobSpec* s) { s->mutable_loss()->set_projection_dim(-1); }, "loss.projection_dim"},
      {[](v1::JobSpec* s) { s->mutable_training()->set_batch_size(1); }, "at least 2 images"},
      {[](v1::JobSpec* s) { s->mutable_dataset()->set_color_jitter_prob(1.5); },
       "dataset.color_jitter_prob"},
      {[](v1::JobSpec* s) { s->mutable_dataset()->set_grayscale_prob(-0.1); },
       "dataset.grayscale_prob"},
      {[](v1::JobSpec* s) { s->mutable_dataset()->set_jitter_hue(0.7); }, "dataset.jitter_hue"},
      {[](v1::JobSpec* s) { s->mutable_dataset()->set_jitter_contrast(-1); },
       "dataset.jitter_contrast"},
      {[](v1::JobSpec* s) { s->mutable_loss()->set_variant("simclr"); }, "supcon-any"},
  };
  for (const auto& [change, words] : cases) {
    Status st = problems(change);
    ASSERT_FALSE(st.ok()) << words;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  }
  // Defaults: τ 0.1, a head of 128 with the embedding's width; MLCD specs keep them unset and
  // every spec flips unless told not to.
  v1::JobSpec contrastive = train_testing::TinySpec(96, 8, 2, 16, 1);
  contrastive.mutable_loss()->set_variant("mulsupcon");
  ApplyJobSpecDefaults(&contrastive);
  EXPECT_EQ(contrastive.loss().temperature(), 0.1);
  EXPECT_EQ(contrastive.loss().projection_dim(), 128);
  EXPECT_EQ(contrastive.loss().projection_hidden_dim(), 32);
  EXPECT_TRUE(contrastive.dataset().horizontal_flip());
  EXPECT_EQ(contrastive.dataset().color_jitter_prob(), 0);
  v1::JobSpec mlcd = train_testing::TinySpec(96, 8, 2, 16, 1);
  ApplyJobSpecDefaults(&mlcd);
  EXPECT_EQ(mlcd.loss().temperature(), 0);
  EXPECT_FALSE(mlcd.loss().has_projection_dim());
}

}  // namespace
}  // namespace mlcd::worker
