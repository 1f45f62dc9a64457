#include "tests/export/export_testing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <vector>

#include "common/npy.h"
#include "common/spec_defaults.h"
#include "worker/dist/collectives.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"

namespace mlcd::testing {

// A job spec with the given model fields (protobuf JSON, as spec.json holds it).
v1::JobSpec ModelSpec(int channels, int image, int patch, int width, int depth, int heads,
                      double mlp_ratio, int embed, const std::string& pooling,
                      const std::string& stem) {
  v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_channels(channels);
  m->set_image_size(image);
  m->set_patch_size(patch);
  m->set_width(width);
  m->set_depth(depth);
  m->set_heads(heads);
  m->set_mlp_ratio(mlp_ratio);
  m->set_embed_dim(embed);
  m->set_pooling(pooling);
  m->set_stem(stem);
  spec.mutable_training()->set_seed(3);
  return spec;
}

// Writes a checkpoint of `spec`'s model under `root` whose every parameter is moved away from
// its initial value (LayerNorm weights off 1, biases off 0), so a tensor mapped to the wrong
// place changes the output. Returns the checkpoint directory.
std::string WriteTestCheckpoint(const std::string& root, const v1::JobSpec& spec) {
  auto options = worker::VitOptionsFromSpec(spec.model());
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  worker::VisionTransformer model(*options);
  model->ResetParameters(7);
  {
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    for (auto& p : model->parameters()) {
      torch::Tensor noise = torch::empty(p.sizes()).normal_(0.0, 0.05, gen);
      p.add_(noise);
    }
  }
  worker::FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  worker::BackboneAdamW optimizer(&flat, worker::BackboneAdamWOptions{});
  worker::CheckpointState state;
  state.meta.steps_per_epoch = 1;
  state.meta.step_in_epoch = 1;
  state.meta.epoch_complete = true;
  state.meta.embedding_dim = spec.model().embed_dim();
  state.spec = &spec;
  state.model = model;
  state.flat = &flat;
  state.optimizer = &optimizer;
  auto comm = worker::Collectives::Local();
  auto dir = worker::WriteCheckpoint(root, state, comm.get());
  EXPECT_TRUE(dir.ok()) << dir.status().ToString();
  return dir.ok() ? *dir : "";
}

// Model inputs [n, channels, s, s]: smooth colour patterns and noise, as preprocessed images
// look.
Status WriteImages(const std::string& path, int n, int channels, int s) {
  std::vector<float> v(static_cast<size_t>(n) * channels * s * s);
  uint64_t state = 12345;
  auto uniform = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  size_t k = 0;
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < channels; ++c) {
      for (int y = 0; y < s; ++y) {
        for (int x = 0; x < s; ++x) {
          const double pattern =
              std::sin(0.3 * (i + 1) * x + 0.7 * c) * std::cos(0.2 * y * (c + 1));
          v[k++] = static_cast<float>(i % 2 ? pattern * 1.5 : 2.0 * (uniform() - 0.5));
        }
      }
    }
  }
  return WriteNpy(path, NpyDtype::kFloat32, {n, channels, s, s}, v.data());
}

// The first n Fashion-MNIST test images as model inputs [n, 1, s, s]: the worker's own
// evaluation preprocessing (scaling, the dataset's normalisation, resize to s).
Status WriteFashionMnistImages(const std::string& path, int n, int s) {
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  MLCD_ASSIGN_OR_RETURN(auto data, worker::OpenImageDataset(spec.dataset(), "test", n));
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  torch::Tensor pixels = torch::empty({n, 1, data->height(), data->width()}, torch::kUInt8);
  MLCD_RETURN_IF_ERROR(data->Gather(ids.data(), n, pixels.data_ptr<uint8_t>()));
  worker::AugmentOptions no_augment;
  no_augment.enabled = false;
  torch::Tensor images =
      worker::PrepareImages(pixels, ids, no_augment, 0, 0, data->mean(), data->stddev(), s)
          .contiguous();
  return WriteNpy(path, NpyDtype::kFloat32, {n, 1, s, s}, images.data_ptr<float>());
}

}  // namespace mlcd::testing
