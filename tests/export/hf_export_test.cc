// Encoders into the Python tools (label interop: the pip flavour's venv, MLCD_INTEROP_PYTHON,
// with transformers and safetensors). A checkpoint made at test time goes through the real
// `mlcdctl export` (which runs `mlcd-worker export`); interop_check.py loads the result with
// transformers' from_pretrained(output_loading_info=True) and fails on any missing, unexpected
// or misshapen key, then compares every hidden state and the embedding with ours (the C++
// forward of the same checkpoint, inference mode as `mlcd-worker embed` runs it) within 1e-4.
// The safetensors export is read with the safetensors library itself.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common/file_util.h"
#include "common/npy.h"
#include "tests/export/export_testing.h"
#include "tests/testing/process.h"
#include "worker/eval/embed.h"

namespace mlcd::testing {
namespace {

namespace fs = std::filesystem;

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* python = std::getenv("MLCD_INTEROP_PYTHON");
    python_ = python ? python : "";
    if (python_.empty() || !PathExists(python_))
      GTEST_SKIP() << "MLCD_INTEROP_PYTHON (" << python_
                   << ") is not there: scripts/run_interop_tests.sh runs this suite";
  }

  // Runs interop_check.py with `args`; with `python_path`, that folder comes first on
  // PYTHONPATH (another transformers than the venv's).
  std::string Check(const std::vector<std::string>& args, const std::string& python_path = "") {
    std::vector<std::string> all = {
        python_, std::string(MLCD_SOURCE_DIR) + "/tests/export/interop_check.py"};
    all.insert(all.end(), args.begin(), args.end());
    if (!python_path.empty()) all.insert(all.begin(), "PYTHONPATH=" + python_path);
    std::string out;
    EXPECT_EQ(RunCommand("/usr/bin/env", all, &out), 0) << out;
    std::cout << "interop_check: " << out;
    return out;
  }

  // The oldest transformers the exports are tested with: scripts/setup.sh installs it beside
  // the venv's own packages (scripts/interop-old-transformers.txt).
  std::string OldTransformers() const {
    return fs::path(python_).parent_path().parent_path().string() + "/old-transformers";
  }

  // Our hidden states [depth + 1, n, tokens, width] and embeddings [n, embed_dim] of the
  // checkpoint's model on images.npy, as the product loads and runs it.
  void WriteOurs(const std::string& ckpt, const std::string& images) {
    auto model = worker::LoadEmbeddingModel(ckpt, nullptr);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<int64_t> shape;
    auto input = ReadNpyAsFloat32(images, &shape);
    ASSERT_TRUE(input.ok()) << input.status().ToString();
    torch::Tensor x = torch::from_blob(input->data(), shape, torch::kFloat).clone();
    torch::NoGradGuard no_grad;
    torch::Tensor hidden = torch::stack(model->model->HiddenStates(x)).contiguous();
    torch::Tensor embedding = model->model->forward(x).contiguous();
    ASSERT_TRUE(WriteNpy(dir_.Sub("hidden.npy"), NpyDtype::kFloat32, hidden.sizes().vec(),
                         hidden.data_ptr<float>())
                    .ok());
    ASSERT_TRUE(WriteNpy(dir_.Sub("embedding.npy"), NpyDtype::kFloat32, embedding.sizes().vec(),
                         embedding.data_ptr<float>())
                    .ok());
  }

  // Exports `spec`'s model with --format `format` and has transformers load and run it (the
  // venv's, and the oldest tested one too with `also_old_transformers`).
  void ExportAndCompare(const v1::JobSpec& spec, const std::string& format,
                        bool also_old_transformers = false) {
    const std::string ckpt = WriteTestCheckpoint(dir_.Sub("ckpt"), spec);
    ASSERT_FALSE(ckpt.empty());
    std::string out;
    ASSERT_EQ(
        RunCommand(BinPath("mlcdctl"),
                   {"export", "--checkpoint", ckpt, "--format", format, "--out", dir_.Sub("hf")},
                   &out),
        0)
        << out;
    const int s = spec.model().image_size(), c = spec.model().channels();
    const Status made = c == 1 ? WriteFashionMnistImages(dir_.Sub("images.npy"), 6, s)
                               : WriteImages(dir_.Sub("images.npy"), 6, c, s);
    ASSERT_TRUE(made.ok()) << made.ToString();
    WriteOurs(ckpt, dir_.Sub("images.npy"));
    if (HasFailure()) return;
    const std::vector<std::string> args = {format,
                                           "--dir",
                                           dir_.Sub("hf"),
                                           "--images",
                                           dir_.Sub("images.npy"),
                                           "--hidden",
                                           dir_.Sub("hidden.npy"),
                                           "--embedding",
                                           dir_.Sub("embedding.npy")};
    Check(args);
    if (!also_old_transformers) return;
    ASSERT_TRUE(PathExists(OldTransformers() + "/transformers"))
        << OldTransformers() << " has no transformers: MLCD_TORCH=pip scripts/setup.sh installs it";
    const std::string old = Check(args, OldTransformers());
    EXPECT_NE(old.find("\"transformers\": \"4.40."), std::string::npos) << old;
  }

  std::string python_;
  TempDir dir_;
};

TEST_F(HfExportTest, VitModelLoadsStrictlyAndComputesOurHiddenStatesAndEmbedding) {
  // mlp_ratio 2.5: intermediate_size 120, not 4 x hidden_size.
  ExportAndCompare(ModelSpec(3, 32, 8, 48, 2, 3, 2.5, 24, "cls", "patch"), "hf-vit");
}

TEST_F(HfExportTest, VitModelTakesGreyModelsAndQuickGelu) {
  // The main job's shape (1 channel, Fashion-MNIST images) with quick GELU: num_channels 1 and
  // hidden_act quick_gelu in config.json.
  v1::JobSpec spec = ModelSpec(1, 28, 7, 32, 2, 2, 4.0, 16, "cls", "patch");
  spec.mutable_model()->set_activation("quick_gelu");
  ExportAndCompare(spec, "hf-vit");
}

// ViTForImageClassification with our projection as its classifier: logits is our embedding,
// in the pinned transformers and in 4.40 (whose ViTModel pooler cannot hold the projection).
TEST_F(HfExportTest, VitClassifierLoadsStrictlyInOldAndNewTransformers) {
  ExportAndCompare(ModelSpec(3, 32, 8, 48, 2, 3, 2.5, 24, "cls", "patch"), "hf-vit-classifier",
                   /*also_old_transformers=*/true);
}

TEST_F(HfExportTest, VitClassifierTakesGreyModelsAndQuickGelu) {
  v1::JobSpec spec = ModelSpec(1, 28, 7, 32, 2, 2, 4.0, 16, "cls", "patch");
  spec.mutable_model()->set_activation("quick_gelu");
  ExportAndCompare(spec, "hf-vit-classifier", /*also_old_transformers=*/true);
}

TEST_F(HfExportTest, ClipVisionTowerLoadsStrictlyAndComputesOurHiddenStatesAndEmbedding) {
  v1::JobSpec spec = ModelSpec(3, 32, 8, 48, 3, 3, 4.0, 24, "cls", "patch");
  spec.mutable_model()->set_layout("clip");
  spec.mutable_model()->set_activation("quick_gelu");
  ExportAndCompare(spec, "hf-clip");
}

TEST_F(HfExportTest, ClipVisionTowerWithExactGelu) {
  v1::JobSpec spec = ModelSpec(3, 16, 4, 32, 2, 4, 2.0, 8, "cls", "patch");
  spec.mutable_model()->set_layout("clip");
  ExportAndCompare(spec, "hf-clip");
}

TEST_F(HfExportTest, SafetensorsLibraryReadsTheSafetensorsExport) {
  // Our own names (a conv-stem model) and torchvision's: safetensors.torch.load_file and
  // safe_open read every tensor equal to the checkpoint's / the .pt's, with our metadata.
  const std::string ckpt =
      WriteTestCheckpoint(dir_.Sub("ckpt"), ModelSpec(3, 32, 8, 48, 2, 3, 2.5, 24, "cls", "patch"));
  ASSERT_FALSE(ckpt.empty());
  std::string out;
  for (const auto& [format, file] : {std::pair<std::string, std::string>{"torchvision", "vit.pt"},
                                     {"safetensors", "st/model.safetensors"}}) {
    ASSERT_EQ(
        RunCommand(BinPath("mlcdctl"),
                   {"export", "--checkpoint", ckpt, "--format", format, "--out", dir_.Sub(file)},
                   &out),
        0)
        << out;
  }
  Check({"safetensors", "--file", dir_.Sub("st/model.safetensors"), "--pt", dir_.Sub("vit.pt"),
         "--tensor-names", "torchvision"});

  const std::string conv =
      WriteTestCheckpoint(dir_.Sub("conv"), ModelSpec(1, 32, 8, 32, 1, 2, 4.0, 16, "mean", "conv"));
  ASSERT_FALSE(conv.empty());
  ASSERT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"export", "--checkpoint", conv, "--format", "safetensors", "--out",
                        dir_.Sub("conv.safetensors")},
                       &out),
            0)
      << out;
  Check({"safetensors", "--file", dir_.Sub("conv.safetensors"), "--checkpoint-dir", conv,
         "--tensor-names", "mlcd"});
}

}  // namespace
}  // namespace mlcd::testing
