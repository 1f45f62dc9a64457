// Encoders out: the safetensors file format against its spec; `mlcdctl export` (the real
// binary, which runs `mlcd-worker export`) on checkpoints written at test time, checked by
// python3-torchvision (export_check.py: VisionTransformer(...).load_state_dict(strict=True)
// and the same embeddings as `mlcd-worker embed --images` on the same input tensors, max abs
// difference <= 1e-4; the safetensors file equal to the .pt); models torchvision cannot
// express refused with the difference named; missing and corrupt checkpoints refused clearly.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "tests/export/export_testing.h"
#include "tests/testing/process.h"
#include "worker/dist/collectives.h"
#include "worker/model/export.h"
#include "worker/model/safetensors.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"

namespace mlcd::testing {
namespace {

using worker::ReadSafetensors;
using worker::SafetensorsTensor;
using worker::WriteSafetensors;

// The exit codes of mlcdctl (client/cli.h).
constexpr int kExitUsage = 2, kExitNotFound = 3, kExitPrecondition = 5;

TEST(SafetensorsTest, LayoutFollowsTheSpecAndReadsBack) {
  TempDir dir;
  std::vector<float> a = {1.5f, -2.0f, 3.25f}, b(12), empty;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) * 0.5f;
  const std::string path = dir.Sub("t.safetensors");
  // Given out of order: written in name order.
  ASSERT_TRUE(
      WriteSafetensors(path, {{"z.b", {3, 4}, b.data()}, {"a", {3}, a.data()}}, {{"format", "pt"}})
          .ok());
  auto bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  EXPECT_EQ(bytes->size(), 8 + n + (3 + 12) * sizeof(float));
  auto header = nlohmann::json::parse(bytes->substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(header["z.b"]["shape"], nlohmann::json({3, 4}));
  EXPECT_EQ(header["z.b"]["data_offsets"], nlohmann::json({12, 60}));
  float first_b = 0;
  std::memcpy(&first_b, bytes->data() + 8 + n + 12 + 4, 4);
  EXPECT_EQ(first_b, 0.5f);
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  EXPECT_EQ(file->tensors.at("a").values, a);
  EXPECT_EQ(file->tensors.at("z.b").values, b);
  EXPECT_EQ(file->tensors.at("z.b").shape, (std::vector<int64_t>{3, 4}));
}

TEST(SafetensorsTest, BadInputIsRefused) {
  TempDir dir;
  std::vector<float> a = {1, 2};
  EXPECT_EQ(WriteSafetensors(dir.Sub("x.safetensors"), {{"a", {2}, a.data()}, {"a", {2}, a.data()}})
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(dir.Sub("x.safetensors"), {{"__metadata__", {2}, a.data()}}).code(),
            StatusCode::kInvalidArgument);
  const std::string path = dir.Sub("t.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", {2}, a.data()}}).ok());
  auto bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(
      WriteFileAtomically(dir.Sub("cut.safetensors"), bytes->substr(0, bytes->size() - 1)).ok());
  auto cut = ReadSafetensors(dir.Sub("cut.safetensors"));
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("do not fit"), std::string::npos)
      << cut.status().ToString();
  std::string huge = *bytes;
  huge[5] = '\x7f';  // a header size far beyond the file
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("huge.safetensors"), huge).ok());
  EXPECT_EQ(ReadSafetensors(dir.Sub("huge.safetensors")).status().code(), StatusCode::kDataLoss);
}

class ExportTest : public ::testing::Test {
 protected:
  int Ctl(const std::vector<std::string>& args, std::string* out) {
    return RunCommand(BinPath("mlcdctl"), args, out);
  }
  // Exports `spec`'s model both ways (with `flags`), embeds the same inputs with
  // `mlcd-worker embed --images` and has export_check.py compare with torchvision.
  void ExportAndCompare(const v1::JobSpec& spec, const std::vector<std::string>& flags,
                        const std::string& expected_call) {
    const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
    ASSERT_FALSE(ckpt.empty());
    std::string out;
    std::vector<std::string> args = {
        "export",      "--checkpoint", dir_.Sub("ckpt"),     "--format",
        "torchvision", "--out",        dir_.Sub("tv/vit.pt")};
    args.insert(args.end(), flags.begin(), flags.end());
    ASSERT_EQ(Ctl(args, &out), 0) << out;
    EXPECT_NE(out.find(expected_call), std::string::npos) << out;
    auto config = ReadFileToString(dir_.Sub("tv/vit.json"));
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(nlohmann::json::parse(*config)["source"]["checkpoint"], ckpt);
    args = {"--output",     "json",  "export",
            "--checkpoint", ckpt,    "--format",
            "safetensors",  "--out", dir_.Sub("st/model.safetensors")};
    args.insert(args.end(), flags.begin(), flags.end());
    ASSERT_EQ(Ctl(args, &out), 0) << out;
    ASSERT_TRUE(PathExists(dir_.Sub("st/model.config.json")));

    const int s = spec.model().image_size();
    const Status made = spec.model().channels() == 1
                            ? WriteFashionMnistImages(dir_.Sub("images.npy"), 12, s)
                            : WriteImages(dir_.Sub("images.npy"), 12, 3, s);
    ASSERT_TRUE(made.ok()) << made.ToString();
    ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                         {"embed", "--checkpoint", ckpt, "--images", dir_.Sub("images.npy"),
                          "--out", dir_.Sub("emb"), "--batch-size", "5", "--threads", "2"},
                         &out),
              0)
        << out;
    ASSERT_EQ(RunCommand("/usr/bin/python3",
                         {std::string(MLCD_SOURCE_DIR) + "/tests/export/export_check.py", "--pt",
                          dir_.Sub("tv/vit.pt"), "--config", dir_.Sub("tv/vit.json"), "--images",
                          dir_.Sub("images.npy"), "--embeddings",
                          dir_.Sub("emb/embeddings-00000-of-00001.npy"), "--checkpoint-dir", ckpt,
                          "--safetensors", dir_.Sub("st/model.safetensors"), "--st-config",
                          dir_.Sub("st/model.config.json")},
                         &out),
              0)
        << out;
    std::cout << "export_check: " << out;
  }
  TempDir dir_;
};

TEST_F(ExportTest, TorchvisionLoadsItAndComputesTheSameEmbeddings) {
  // mlp_ratio 2.5: mlp_dim 120, not a multiple of 4 x width.
  ExportAndCompare(ModelSpec(3, 32, 8, 48, 2, 3, 2.5, 24, "cls", "patch"), {},
                   "VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=3, "
                   "hidden_dim=48, mlp_dim=120, num_classes=24)");
}

TEST_F(ExportTest, GreyModelAsRgbComputesTheSameEmbeddingsOnRepeatedChannels) {
  // A Fashion-MNIST-shaped model (what the main job trains), on real Fashion-MNIST images.
  ExportAndCompare(ModelSpec(1, 28, 7, 32, 1, 2, 4.0, 16, "cls", "patch"), {"--grey-as-rgb"},
                   "VisionTransformer(image_size=28, patch_size=7, num_layers=1, num_heads=2, "
                   "hidden_dim=32, mlp_dim=128, num_classes=16)");
}

TEST_F(ExportTest, ModelsTorchvisionCannotExpressAreRefusedNamingTheDifference) {
  // Conv stem, mean pooling, one channel: none of them has a torchvision counterpart.
  v1::JobSpec spec = ModelSpec(1, 32, 8, 32, 1, 2, 4.0, 16, "mean", "conv");
  const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
  ASSERT_FALSE(ckpt.empty());
  std::string out;
  EXPECT_EQ(
      Ctl({"export", "--checkpoint", ckpt, "--format", "torchvision", "--out", dir_.Sub("x.pt")},
          &out),
      kExitPrecondition)
      << out;
  for (const char* what : {"FAILED_PRECONDITION", "model.stem is \"conv\"",
                           "model.pooling is \"mean\"", "model.channels is 1", "safetensors"})
    EXPECT_NE(out.find(what), std::string::npos) << what << " missing in: " << out;
  EXPECT_FALSE(PathExists(dir_.Sub("x.pt")));

  // safetensors takes it, with our own names, equal to the checkpoint's parameters.
  ASSERT_EQ(Ctl({"export", "--checkpoint", ckpt, "--format", "safetensors", "--out",
                 dir_.Sub("st/m.safetensors")},
                &out),
            0)
      << out;
  auto file = ReadSafetensors(dir_.Sub("st/m.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata.at("tensor_names"), "mlcd");
  auto options = worker::VitOptionsFromSpec(spec.model());
  ASSERT_TRUE(options.ok());
  worker::VisionTransformer model(*options);
  ASSERT_TRUE(worker::LoadBackboneWeights(ckpt, model).ok());
  size_t n = 0;
  for (const auto& item : model->named_parameters()) {
    ++n;
    ASSERT_TRUE(file->tensors.count(item.key())) << item.key();
    const auto& t = file->tensors.at(item.key());
    EXPECT_EQ(t.shape, item.value().sizes().vec()) << item.key();
    torch::Tensor c = item.value().contiguous();
    EXPECT_EQ(std::memcmp(t.values.data(), c.data_ptr<float>(), t.values.size() * 4), 0)
        << item.key();
  }
  EXPECT_EQ(file->tensors.size(), n);
  auto config = ReadFileToString(dir_.Sub("st/m.config.json"));
  ASSERT_TRUE(config.ok());
  auto j = nlohmann::json::parse(*config);
  EXPECT_EQ(j["tensor_names"], "mlcd");
  EXPECT_NE(j["torchvision_incompatible"].get<std::string>().find("conv"), std::string::npos);
}

// Two safetensors exports into one folder: each keeps its own config, named after its file.
// Before, both wrote the folder's config.json and the second replaced the first's.
TEST_F(ExportTest, SafetensorsExportsIntoOneFolderEachKeepTheirConfig) {
  const std::string a = WriteTestCheckpoint(dir_.Sub("ckpt-a"),
                                            ModelSpec(3, 32, 8, 48, 2, 3, 2.5, 24, "cls", "patch"));
  const std::string b = WriteTestCheckpoint(dir_.Sub("ckpt-b"),
                                            ModelSpec(1, 32, 8, 32, 1, 2, 4.0, 16, "mean", "conv"));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  for (const auto& [ckpt, name] : {std::pair{a, "a"}, std::pair{b, "b"}}) {
    std::string out;
    ASSERT_EQ(Ctl({"export", "--checkpoint", ckpt, "--format", "safetensors", "--out",
                   dir_.Sub("st/" + std::string(name) + ".safetensors")},
                  &out),
              0)
        << out;
    EXPECT_NE(out.find(dir_.Sub("st/" + std::string(name) + ".config.json")), std::string::npos)
        << out;
  }
  for (const auto& [ckpt, name] : {std::pair{a, "a"}, std::pair{b, "b"}}) {
    auto config = ReadFileToString(dir_.Sub("st/" + std::string(name) + ".config.json"));
    ASSERT_TRUE(config.ok()) << name << ": " << config.status().ToString();
    EXPECT_EQ(nlohmann::json::parse(*config)["source"]["checkpoint"], ckpt) << name;
  }
  EXPECT_FALSE(PathExists(dir_.Sub("st/config.json")));
}

TEST_F(ExportTest, HuggingFaceFormatsRefuseModelsTheirClassCannotExpress) {
  // The CLIP layout (quick GELU): torchvision and ViTModel cannot express it; hf-clip can.
  v1::JobSpec clip = ModelSpec(3, 16, 8, 16, 1, 2, 2.0, 8, "cls", "patch");
  clip.mutable_model()->set_layout("clip");
  clip.mutable_model()->set_activation("quick_gelu");
  const std::string clip_ckpt = WriteTestCheckpoint(dir_.Sub("clip"), clip);
  ASSERT_FALSE(clip_ckpt.empty());
  std::string out;
  EXPECT_EQ(
      Ctl({"export", "--checkpoint", clip_ckpt, "--format", "hf-vit", "--out", dir_.Sub("hf-vit")},
          &out),
      kExitPrecondition)
      << out;
  for (const char* what : {"ViTModel cannot express", "model.layout is \"clip\"", "hf-clip"})
    EXPECT_NE(out.find(what), std::string::npos) << what << " missing in: " << out;
  EXPECT_FALSE(PathExists(dir_.Sub("hf-vit")));
  EXPECT_EQ(Ctl({"export", "--checkpoint", clip_ckpt, "--format", "torchvision", "--out",
                 dir_.Sub("x.pt")},
                &out),
            kExitPrecondition)
      << out;
  for (const char* what :
       {"model.layout is \"clip\"", "model.activation is \"quick_gelu\"", "LayerNorm eps"})
    EXPECT_NE(out.find(what), std::string::npos) << what << " missing in: " << out;

  // The paper's layout with mean pooling and a conv stem: hf-clip names all three.
  v1::JobSpec vit = ModelSpec(3, 32, 8, 32, 1, 2, 4.0, 16, "mean", "conv");
  const std::string vit_ckpt = WriteTestCheckpoint(dir_.Sub("vit"), vit);
  ASSERT_FALSE(vit_ckpt.empty());
  EXPECT_EQ(
      Ctl({"export", "--checkpoint", vit_ckpt, "--format", "hf-clip", "--out", dir_.Sub("hf-clip")},
          &out),
      kExitPrecondition)
      << out;
  for (const char* what :
       {"CLIPVisionModelWithProjection cannot express", "model.layout is \"vit\"",
        "model.stem is \"conv\"", "model.pooling is \"mean\"", "--format safetensors"})
    EXPECT_NE(out.find(what), std::string::npos) << what << " missing in: " << out;
  EXPECT_FALSE(PathExists(dir_.Sub("hf-clip")));

  // --out names a directory; a file there is refused, and so is --grey-as-rgb.
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("file"), "x").ok());
  EXPECT_EQ(
      Ctl({"export", "--checkpoint", clip_ckpt, "--format", "hf-clip", "--out", dir_.Sub("file")},
          &out),
      kExitUsage)
      << out;
  EXPECT_NE(out.find("writes a directory"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"export", "--checkpoint", clip_ckpt, "--format", "hf-clip", "--out", dir_.Sub("d"),
                 "--grey-as-rgb"},
                &out),
            kExitUsage)
      << out;
  EXPECT_NE(out.find("--grey-as-rgb is for --format torchvision"), std::string::npos) << out;

  // What the CLIP export writes: both files, the config naming the class (transformers itself
  // loads it in hf_export_test).
  ASSERT_EQ(
      Ctl({"export", "--checkpoint", clip_ckpt, "--format", "hf-clip", "--out", dir_.Sub("tower")},
          &out),
      0)
      << out;
  EXPECT_NE(out.find("CLIPVisionModelWithProjection.from_pretrained"), std::string::npos) << out;
  auto config = ReadFileToString(dir_.Sub("tower/config.json"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto j = nlohmann::json::parse(*config);
  EXPECT_EQ(j["model_type"], "clip_vision_model");
  EXPECT_EQ(j["hidden_act"], "quick_gelu");
  EXPECT_EQ(j["projection_dim"], 8);
  auto file = ReadSafetensors(dir_.Sub("tower/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->tensors.count("vision_model.embeddings.patch_embedding.bias"), 0u);
  EXPECT_EQ(file->tensors.at("vision_model.pre_layrnorm.weight").shape, std::vector<int64_t>({16}));
}

// hf-vit-classifier: hf-vit's tensors under "vit.", the projection as the classifier (bias 0),
// no pooler; the config has one label per embedding dimension and no pooler settings. The
// clip layout is refused naming the class (transformers loads it in hf_export_test).
TEST_F(ExportTest, VitClassifierHoldsTheProjectionAsItsClassifier) {
  v1::JobSpec spec = ModelSpec(3, 16, 8, 16, 1, 2, 2.0, 8, "cls", "patch");
  const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
  ASSERT_FALSE(ckpt.empty());
  std::string out;
  ASSERT_EQ(Ctl({"export", "--checkpoint", ckpt, "--format", "hf-vit-classifier", "--out",
                 dir_.Sub("cls")},
                &out),
            0)
      << out;
  EXPECT_NE(out.find("ViTForImageClassification.from_pretrained"), std::string::npos) << out;
  auto config = ReadFileToString(dir_.Sub("cls/config.json"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto j = nlohmann::json::parse(*config);
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"ViTForImageClassification"}));
  EXPECT_EQ(j["num_labels"], 8);
  EXPECT_FALSE(j.contains("pooler_output_size"));
  auto file = ReadSafetensors(dir_.Sub("cls/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->tensors.at("classifier.weight").shape, std::vector<int64_t>({8, 16}));
  EXPECT_EQ(file->tensors.at("vit.embeddings.cls_token").shape, std::vector<int64_t>({1, 1, 16}));
  for (float b : file->tensors.at("classifier.bias").values) EXPECT_EQ(b, 0.0f);
  EXPECT_EQ(file->tensors.count("vit.pooler.dense.weight"), 0u);
  EXPECT_EQ(file->tensors.count("pooler.dense.weight"), 0u);
  for (const auto& [name, tensor] : file->tensors)
    EXPECT_TRUE(name.rfind("vit.", 0) == 0 || name.rfind("classifier.", 0) == 0) << name;

  v1::JobSpec clip = spec;
  clip.mutable_model()->set_layout("clip");
  const std::string clip_ckpt = WriteTestCheckpoint(dir_.Sub("clip"), clip);
  ASSERT_FALSE(clip_ckpt.empty());
  EXPECT_EQ(Ctl({"export", "--checkpoint", clip_ckpt, "--format", "hf-vit-classifier", "--out",
                 dir_.Sub("clip-cls")},
                &out),
            kExitPrecondition)
      << out;
  EXPECT_NE(out.find("ViTForImageClassification cannot express"), std::string::npos) << out;
}

TEST_F(ExportTest, BadRequestsAndCheckpointsGetClearErrors) {
  std::string out;
  EXPECT_EQ(Ctl({"export", "--checkpoint", dir_.Sub("nope"), "--format", "torchvision", "--out",
                 dir_.Sub("x.pt")},
                &out),
            kExitNotFound)
      << out;
  EXPECT_NE(out.find("no such checkpoint"), std::string::npos) << out;

  v1::JobSpec spec = ModelSpec(3, 16, 8, 16, 1, 2, 2.0, 8, "cls", "patch");
  const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
  ASSERT_FALSE(ckpt.empty());
  EXPECT_EQ(
      Ctl({"export", "--checkpoint", ckpt, "--format", "onnx", "--out", dir_.Sub("x.pt")}, &out),
      kExitUsage)
      << out;
  EXPECT_NE(out.find("torchvision, safetensors, hf-vit, hf-vit-classifier or hf-clip"),
            std::string::npos)
      << out;
  EXPECT_EQ(Ctl({"export", "--checkpoint", ckpt, "--format", "torchvision", "--out",
                 dir_.Sub("x.safetensors")},
                &out),
            kExitUsage)
      << out;
  EXPECT_NE(out.find(".pt or .pth"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"export", "--checkpoint", ckpt, "--format", "torchvision", "--out",
                 dir_.Sub("x.pt"), "--grey-as-rgb"},
                &out),
            kExitUsage)
      << out;
  EXPECT_NE(out.find("for 1-channel models"), std::string::npos) << out;

  // A directory that is no checkpoint.
  ASSERT_TRUE(MakeDirs(dir_.Sub("empty")).ok());
  EXPECT_EQ(Ctl({"export", "--checkpoint", dir_.Sub("empty"), "--format", "torchvision", "--out",
                 dir_.Sub("x.pt")},
                &out),
            kExitPrecondition)
      << out;
  EXPECT_NE(out.find("neither a checkpoint"), std::string::npos) << out;

  // Truncated weights: refused, naming the file; nothing written.
  const std::string weights = ckpt + "/backbone.weights.npy";
  auto bytes = ReadFileToString(weights);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomically(weights, bytes->substr(0, bytes->size() / 2)).ok());
  EXPECT_NE(
      Ctl({"export", "--checkpoint", ckpt, "--format", "torchvision", "--out", dir_.Sub("x.pt")},
          &out),
      0)
      << out;
  EXPECT_NE(out.find("backbone.weights.npy"), std::string::npos) << out;
  EXPECT_FALSE(PathExists(dir_.Sub("x.pt")));
}

// A checkpoint's spec.json is input: a model beyond the spec limits (width 8192, depth 128:
// about 1e11 parameters, 412 GB of float32) is refused by `mlcd-worker export` from spec.json
// alone, naming the parameter count, before anything is built or the weights are read. The
// child runs with its address space capped (prlimit --as), so building would fail there too
// instead of taking the test machine's memory.
TEST_F(ExportTest, CheckpointSpecBeyondTheLimitsIsRefusedBeforeBuilding) {
  v1::JobSpec spec = ModelSpec(3, 16, 8, 16, 1, 2, 2.0, 8, "cls", "patch");
  const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
  ASSERT_FALSE(ckpt.empty());
  const std::string huge =
      R"({"model": {"channels": 3, "image_size": 224, "patch_size": 16, "width": 8192,)"
      R"( "depth": 128, "heads": 64, "mlp_ratio": 4, "embed_dim": 512}})";
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/spec.json", huge).ok());
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  const int rc = RunCommand(
      "/usr/bin/prlimit",
      {"--as=" + std::to_string(int64_t{4} << 30), BinPath("mlcd-worker"), "export", "--checkpoint",
       ckpt, "--format", "safetensors", "--out", dir_.Sub("x.safetensors")},
      &out, {}, std::chrono::seconds(60));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("spec.json"), std::string::npos) << out;
  EXPECT_NE(out.find("model.width"), std::string::npos) << out;
  EXPECT_NE(out.find("parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("1.03079e+11"), std::string::npos) << out;
  EXPECT_LT(seconds, 5.0) << out;
  EXPECT_FALSE(PathExists(dir_.Sub("x.safetensors")));
}

// Within the limits but not within this host's memory: `mlcd-worker embed` with a batch no
// host holds is refused before it builds the model, with the parameters, the activations of
// that batch, the free bytes and the batch size that would fit.
TEST_F(ExportTest, EmbedBatchBeyondTheHostsMemoryIsRefusedWithTheNumbers) {
  v1::JobSpec spec = ModelSpec(3, 16, 8, 16, 1, 2, 2.0, 8, "cls", "patch");
  const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
  ASSERT_FALSE(ckpt.empty());
  ASSERT_TRUE(WriteImages(dir_.Sub("images.npy"), 4, 3, 16).ok());
  std::string out;
  const int rc =
      RunCommand(BinPath("mlcd-worker"),
                 {"embed", "--checkpoint", ckpt, "--images", dir_.Sub("images.npy"), "--out",
                  dir_.Sub("emb"), "--batch-size", "1000000000000", "--threads", "1"},
                 &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("RESOURCE_EXHAUSTED"), std::string::npos) << out;
  EXPECT_NE(out.find("parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("activations"), std::string::npos) << out;
  EXPECT_NE(out.find("1000000000000 images of 5 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("free"), std::string::npos) << out;
  EXPECT_NE(out.find("a batch size of at most"), std::string::npos) << out;
  EXPECT_FALSE(PathExists(dir_.Sub("emb/embeddings-00000-of-00001.npy")));
}

}  // namespace
}  // namespace mlcd::testing
