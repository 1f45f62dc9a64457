// The YAML job spec parser and validator (common/job_spec.h).
#include "common/job_spec.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace mlcd {
namespace {

const char* kMinimal = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata:
  name: t1
  labels: {team: vision}
spec:
  dataset: {limit: 500}
  clustering: {k: 32, l: 4}
  training: {world_size: 2, batch_size: 64}
)";

bool HasProblem(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(JobSpecYaml, ParsesMetadataAndSpecWithoutDefaults) {
  auto job = ParseJobSpecYaml(kMinimal);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metadata.name(), "t1");
  EXPECT_EQ(job->metadata.labels().at("team"), "vision");
  EXPECT_EQ(job->spec.dataset().limit(), 500u);
  EXPECT_EQ(job->spec.clustering().k(), 32);
  EXPECT_EQ(job->spec.clustering().l(), 4);
  EXPECT_EQ(job->spec.training().world_size(), 2);
  // Defaults are not applied by the parser.
  EXPECT_EQ(job->spec.training().epochs_per_round(), 0);
  EXPECT_FALSE(job->spec.evaluation().has_enabled());
}

TEST(JobSpecYaml, LoadAppliesDefaultsAndValidates) {
  auto job = LoadJobSpecYaml(kMinimal);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.training().epochs_per_round(), 1);
  EXPECT_EQ(job->spec.loss().variant(), "mlcd");
  EXPECT_DOUBLE_EQ(job->spec.loss().margin(), 0.3);
  EXPECT_EQ(job->spec.model().width(), 192);
  EXPECT_TRUE(job->spec.evaluation().enabled());
}

// A given label set brings k and l (the coordinator fills them at submit): left out, they
// stay 0 and are no problem; the set trains one round and has no centroids.
TEST(JobSpecYaml, GivenLabelSetLeavesKAndLToTheSet) {
  const std::string given = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: t1}
spec:
  dataset: {limit: 500}
  clustering: {label_set: team/tags}
  training: {world_size: 2, batch_size: 64}
)";
  auto job = LoadJobSpecYaml(given);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.clustering().label_set(), "team/tags");
  EXPECT_EQ(job->spec.clustering().k(), 0);
  EXPECT_EQ(job->spec.clustering().l(), 0);

  std::string two_rounds = given;
  two_rounds.replace(two_rounds.find("world_size"), 0, "rounds: 2, centre_init: centroids, ");
  auto refused = LoadJobSpecYaml(two_rounds);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(HasProblem(refused.status(),
                         "spec.training.rounds: 2: rounds > 1 needs clustering; "
                         "a given label set trains one round"))
      << refused.status().ToString();
  EXPECT_TRUE(HasProblem(refused.status(), "spec.training.centre_init: 'centroids'"))
      << refused.status().ToString();

  // Given k and l are still checked as values.
  std::string bad_l = given;
  bad_l.replace(bad_l.find("label_set"), 0, "k: 4, l: 5, ");
  auto l = LoadJobSpecYaml(bad_l);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(HasProblem(l.status(), "spec.clustering.l: 5 > k: 4")) << l.status().ToString();
}

TEST(JobSpecYaml, OptionalFieldsKeepExplicitZeroAndFalse) {
  auto job =
      LoadJobSpecYaml(std::string(kMinimal) +
                      "  loss: {margin: 0, margin_type: none}\n  evaluation: {enabled: false}\n"
                      "  optimizer: {weight_decay: 0}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->spec.loss().has_margin());
  EXPECT_DOUBLE_EQ(job->spec.loss().margin(), 0);
  EXPECT_FALSE(job->spec.evaluation().enabled());
  EXPECT_DOUBLE_EQ(job->spec.optimizer().weight_decay(), 0);
}

TEST(JobSpecYaml, LGreaterThanKNamesBothValues) {
  auto job = LoadJobSpecYaml(R"(apiVersion: mlcd/v1
kind: TrainingJob
spec:
  clustering: {k: 10, l: 12}
)");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasProblem(job.status(), "spec.clustering.l: 12 > k: 10")) << job.status().message();
}

// Fashion-MNIST is grey: a 3-channel model used to pass and fail at training until the restart
// budget was spent. Both numbers are named; 1 (or the default) passes.
TEST(JobSpecYaml, ModelChannelsMustMatchFashionMnist) {
  auto job = LoadJobSpecYaml(std::string(kMinimal) + "  model: {channels: 3}\n");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasProblem(job.status(),
                         "spec.model.channels: 3 but fashion-mnist (spec.dataset) has 1 channel"))
      << job.status().message();
  // Reported once: the evaluation dataset defaults to the same one.
  EXPECT_EQ(job.status().message().find("evaluation.dataset"), std::string::npos)
      << job.status().message();
  EXPECT_TRUE(LoadJobSpecYaml(std::string(kMinimal) + "  model: {channels: 1}\n").ok());
  EXPECT_TRUE(LoadJobSpecYaml(kMinimal).ok());
}

TEST(JobSpecYaml, EvaluationFeaturesDefaultAndAreChecked) {
  auto job = LoadJobSpecYaml(kMinimal);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.evaluation().features(), "embedding");
  EXPECT_EQ(job->spec.evaluation().feature_blocks(), 4);  // vit-tiny has depth 6
  auto shallow = LoadJobSpecYaml(std::string(kMinimal) +
                                 "  model: {depth: 2}\n  evaluation: {features: blocks}\n");
  ASSERT_TRUE(shallow.ok()) << shallow.status().ToString();
  EXPECT_EQ(shallow->spec.evaluation().feature_blocks(), 2);
  auto bad =
      LoadJobSpecYaml(std::string(kMinimal) +
                      "  model: {depth: 2}\n  evaluation: {features: cls, feature_blocks: 3}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasProblem(bad.status(), "spec.evaluation.features")) << bad.status().message();
  EXPECT_TRUE(HasProblem(bad.status(), "embedding, pooled, blocks, tokens"))
      << bad.status().message();
  EXPECT_TRUE(HasProblem(bad.status(), "spec.evaluation.feature_blocks: 3 > model.depth 2"))
      << bad.status().message();
}

TEST(JobSpecYaml, ModelStemDefaultsToPatchAndConvNeedsAReachableGrid) {
  // ceil(log2 p) halvings of the side, rounding up, must land on image / patch.
  EXPECT_EQ(ConvStemLayers(28, 7), 3);     // 28 -> 14 -> 7 -> 4
  EXPECT_EQ(ConvStemLayers(28, 4), 2);     // 28 -> 14 -> 7
  EXPECT_EQ(ConvStemLayers(28, 14), 4);    // 28 -> 14 -> 7 -> 4 -> 2
  EXPECT_EQ(ConvStemLayers(28, 1), 0);     // a 1x1 projection of every pixel
  EXPECT_EQ(ConvStemLayers(224, 16), 4);   // 224 -> 14
  EXPECT_EQ(ConvStemLayers(224, 14), -1);  // 4 halvings give 14, not 16
  EXPECT_EQ(ConvStemLayers(28, 5), -1);    // not a grid at all
  auto job = LoadJobSpecYaml(kMinimal);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.model().stem(), "patch");
  auto conv = LoadJobSpecYaml(std::string(kMinimal) + "  model: {stem: conv}\n");
  ASSERT_TRUE(conv.ok()) << conv.status().ToString();
  auto typo = LoadJobSpecYaml(std::string(kMinimal) + "  model: {stem: convolution}\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasProblem(typo.status(), "spec.model.stem")) << typo.status().message();
  auto unreachable = LoadJobSpecYaml(std::string(kMinimal) +
                                     "  model: {stem: conv, image_size: 224, patch_size: 14}\n");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_TRUE(HasProblem(unreachable.status(), "spec.model.stem: \"conv\" halves the image side"))
      << unreachable.status().message();
  EXPECT_TRUE(
      HasProblem(unreachable.status(), "cannot reach 16 tokens per side from image_size 224"))
      << unreachable.status().message();
}

TEST(JobSpecYaml, LabelHeadVariantsAndMulconFieldsAreDefaultedAndChecked) {
  auto bce = LoadJobSpecYaml(std::string(kMinimal) + "  loss: {variant: bce}\n");
  ASSERT_TRUE(bce.ok()) << bce.status().ToString();
  EXPECT_FALSE(bce->spec.loss().has_mulcon());
  auto mulcon = LoadJobSpecYaml(std::string(kMinimal) + "  loss: {variant: mulcon}\n");
  ASSERT_TRUE(mulcon.ok()) << mulcon.status().ToString();
  const auto& m = mulcon->spec.loss().mulcon();
  EXPECT_EQ(m.label_dim(), 256);
  EXPECT_EQ(m.heads(), 4);
  EXPECT_EQ(m.projection_dim(), 128);
  EXPECT_EQ(m.pretrain_fraction(), 0.5);
  EXPECT_EQ(m.contrastive_lr_multiplier(), 0.1);
  EXPECT_EQ(m.llcl_weight(), 0.1);
  EXPECT_EQ(m.temperature(), 0.2);
  auto bad = LoadJobSpecYaml(std::string(kMinimal) +
                             "  loss: {variant: mulcon, mulcon: {heads: 5, pretrain_fraction: 1, "
                             "temperature: -1}}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(HasProblem(bad.status(), "spec.loss.mulcon.heads: 5 must divide label_dim (256)"))
      << bad.status().ToString();
  EXPECT_TRUE(HasProblem(bad.status(), "spec.loss.mulcon.pretrain_fraction: 1 is not in [0, 1)"));
  EXPECT_TRUE(HasProblem(bad.status(), "spec.loss.mulcon.temperature"));
  // L x D per image for the batch: refused at submit with the numbers.
  auto huge = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: t1}\nspec:\n"
      "  dataset: {limit: 5000}\n  clustering: {k: 1000, l: 4}\n"
      "  training: {world_size: 1, batch_size: 4096}\n"
      "  loss: {variant: mulcon, mulcon: {label_dim: 8192}}\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(HasProblem(huge.status(), "spec.loss.mulcon.label_dim: the label-level embeddings "
                                        "of one worker's batch would take about"))
      << huge.status().ToString();
  EXPECT_TRUE(HasProblem(huge.status(), "4096 images per worker x L = 1000 labels x D = 8192"));
}

TEST(JobSpecYaml, ReportsEveryProblemAtOnce) {
  auto job = LoadJobSpecYaml(R"(apiVersion: mlcd/v2
kind: TrainingJob
metadata: {name: "bad name!"}
spec:
  dataset: {limit: 100, crop_min_scale: 1.5}
  clustering:
    k: 200
    l: -2
    features: {kind: clip}
  loss: {variant: arcface, sample_ratio: 1.5}
  model: {width: 100, heads: 3}
  training:
    batch_sze: 64
    batch_size: 30
    world_size: 4
    epochs_per_round: -1
  bogus_section: 1
)");
  ASSERT_FALSE(job.ok());
  const Status& s = job.status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* expected : {
           "apiVersion (line 1): 'mlcd/v2' is not supported; use mlcd/v1",
           "metadata.name: 'bad name!'",
           "spec.clustering.k: 200 > the 100 training images (spec.dataset.limit)",
           "spec.dataset.crop_min_scale: 1.5 is outside [0, 1]",
           "spec.clustering.l: -2 must be >= 1",
           "spec.clustering.features.kind: 'clip' is not one of: pixels, random-projection, npy, "
           "model",
           "spec.loss.variant: 'arcface' is not one of: mlcd, mlc, softmax",
           "spec.loss.sample_ratio: 1.5 is not in (0, 1]",
           "spec.model.width: 100 is not divisible by heads: 3",
           "spec.training.batch_sze (line 13): unknown field; did you mean batch_size?",
           "spec.training.batch_size: 30 is not divisible by world_size: 4",
           "spec.training.epochs_per_round: -1 is not in [1, 100000]",
           "spec.bogus_section (line 17): unknown field; known fields: dataset, clustering",
       }) {
    EXPECT_TRUE(HasProblem(s, expected)) << "missing: " << expected << "\nin:\n" << s.message();
  }
  EXPECT_TRUE(HasProblem(s, "invalid job spec (13 problems)")) << s.message();
}

TEST(JobSpecYaml, WrongTypesAreReportedWithLine) {
  auto job = ParseJobSpecYaml(R"(apiVersion: mlcd/v1
kind: TrainingJob
spec:
  clustering:
    k: lots
    l: 2.5
    features: {kind: npy, paths: /one/file.npy}
  training: [1, 2]
  dataset: {limit: -5, augment: maybe}
  evaluation:
    knn_k: 99999999999
)");
  ASSERT_FALSE(job.ok());
  const Status& s = job.status();
  for (const char* expected : {
           "spec.clustering.k (line 5): 'lots' is not a whole number",
           "spec.clustering.l (line 6): '2.5' is not a whole number",
           "spec.clustering.features.paths (line 7): expected a list",
           "spec.training (line 8): expected a mapping of fields, got a list",
           "spec.dataset.limit (line 9): '-5' is not a whole number >= 0",
           "spec.dataset.augment (line 9): 'maybe' is not true or false",
           "spec.evaluation.knn_k (line 11): 99999999999 is out of range for a 32-bit integer",
       }) {
    EXPECT_TRUE(HasProblem(s, expected)) << "missing: " << expected << "\nin:\n" << s.message();
  }
}

TEST(JobSpecYaml, StructuralProblems) {
  EXPECT_TRUE(HasProblem(ParseJobSpecYaml("spec: [unclosed").status(), "not valid YAML: line 1"));
  EXPECT_TRUE(HasProblem(ParseJobSpecYaml("- a\n- b\n").status(), "a job spec is a YAML mapping"));
  auto missing = ParseJobSpecYaml("metadata: {name: x}\n");
  EXPECT_TRUE(HasProblem(missing.status(), "apiVersion: missing; add 'apiVersion: mlcd/v1'"));
  EXPECT_TRUE(HasProblem(missing.status(), "kind: missing"));
  EXPECT_TRUE(HasProblem(missing.status(), "spec: missing"));
  EXPECT_TRUE(HasProblem(ParseJobSpecYaml("apiVersion: mlcd/v1\nkind: Job\nspec: {}\n").status(),
                         "kind (line 2): 'Job' is not supported; use TrainingJob"));
  // An empty spec section is fine: everything defaults.
  EXPECT_TRUE(LoadJobSpecYaml("apiVersion: mlcd/v1\nkind: TrainingJob\nspec: {}\n").ok());
}

TEST(JobSpecYaml, NpyFeaturesNeedPathsAndOthersRejectThem) {
  auto npy = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering:\n"
      "    features: {kind: npy}\n");
  EXPECT_TRUE(HasProblem(npy.status(), "spec.clustering.features.paths: empty; kind 'npy' needs"))
      << npy.status().message();
  auto pixels = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering:\n"
      "    features: {kind: pixels, paths: [a.npy]}\n");
  EXPECT_TRUE(HasProblem(pixels.status(),
                         "spec.clustering.features.paths: only read when features.kind is 'npy'"));
}

TEST(JobSpecYaml, ClusteringEngineDefaultsToClusterdAndIsChecked) {
  auto plain = LoadJobSpecYaml("apiVersion: mlcd/v1\nkind: TrainingJob\nspec: {}\n");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->spec.clustering().engine(), "clusterd");
  auto unknown = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering: {engine: faiss}\n");
  EXPECT_TRUE(HasProblem(unknown.status(), "spec.clustering.engine")) << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("clusterd"), std::string::npos);
  auto gang = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering:\n"
      "    {engine: gang, features: {kind: npy, paths: [a.npy]}}\n");
  EXPECT_TRUE(gang.ok()) << gang.status().message();
  // Round-0 features of the dataset are the gang's too (its ranks compute them).
  for (const char* kind : {"pixels", "random-projection"}) {
    auto generated = LoadJobSpecYaml(
        std::string("apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering:\n"
                    "    {engine: gang, features: {kind: ") + kind + "}}\n");
    EXPECT_TRUE(generated.ok()) << kind << ": " << generated.status().message();
  }
  // An approximate search stays clusterd's alone.
  auto ivf = LoadJobSpecYaml(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  clustering:\n"
      "    {engine: gang, features: {kind: random-projection}, search: ivf}\n");
  EXPECT_FALSE(HasProblem(ivf.status(), "spec.clustering.engine")) << ivf.status().message();
  EXPECT_TRUE(HasProblem(ivf.status(), "spec.clustering.search: 'ivf' is an approximate"))
      << ivf.status().message();
}

TEST(JobSpecYaml, YamlRoundTrip) {
  auto job = LoadJobSpecYaml(kMinimal);
  ASSERT_TRUE(job.ok());
  std::string text = JobSpecToYaml(*job);
  auto again = ParseJobSpecYaml(text);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << text;
  EXPECT_EQ(again->spec.SerializeAsString(), job->spec.SerializeAsString()) << text;
  EXPECT_EQ(again->metadata.SerializeAsString(), job->metadata.SerializeAsString());
}

TEST(JobSpecYaml, EveryExampleLoads) {
  const std::string dir = std::string(MLCD_SOURCE_DIR) + "/examples";
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int count = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 5 || name.substr(name.size() - 5) != ".yaml") continue;
    auto text = ReadFileToString(dir + "/" + name);
    ASSERT_TRUE(text.ok());
    auto job = LoadJobSpecYaml(*text);
    EXPECT_TRUE(job.ok()) << name << ": " << job.status().ToString();
    ++count;
  }
  closedir(d);
  EXPECT_GE(count, 5);
}

TEST(JobSpecValidate, DefaultsAloneAreValid) {
  v1::JobSpec spec;
  EXPECT_TRUE(ValidateJobSpec(&spec).ok());
  // Idempotent.
  v1::JobSpec again = spec;
  ApplyJobSpecDefaults(&again);
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
}

}  // namespace
}  // namespace mlcd
