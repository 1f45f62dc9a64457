// The model-memory estimate (worker/model/model_memory.h) against numbers worked by hand from
// the ViT's shapes and against the parameters a real VisionTransformer registers; the refusal
// names every part, the total, the free bytes and the share, and what would fit.
#include <gtest/gtest.h>

#include <string>

#include "worker/model/model_memory.h"
#include "worker/model/vit.h"

namespace mlcd::worker {
namespace {

// image 16, patch 4 (16 patches + the class token: 17 tokens), width 8, depth 2, heads 2,
// mlp_ratio 2 (hidden 16), embed_dim 6, 3 channels.
VitOptions SmallVit() {
  VitOptions o;
  o.image_size = 16;
  o.patch_size = 4;
  o.channels = 3;
  o.width = 8;
  o.depth = 2;
  o.heads = 2;
  o.mlp_ratio = 2.0;
  o.embed_dim = 6;
  return o;
}

// Worked from the shapes: patch 8*3*4*4 + bias 8; class token 8; position 17*8;
// per block: LayerNorms 2*(8+8), qkv 24*8+24, proj 8*8+8, fc1 16*8+16, fc2 8*16+8;
// final LayerNorm 16; projection 6*8.
constexpr int64_t kSmallVitParameters =
    (384 + 8) + 8 + 136 + 2 * (32 + 216 + 72 + 144 + 136) + 16 + 48;

TEST(ModelMemoryTest, ParameterCountMatchesTheHandCountAndTheModel) {
  const VitOptions o = SmallVit();
  EXPECT_EQ(VitParameterCount(o), kSmallVitParameters);
  EXPECT_EQ(VitParameterCount(o), VisionTransformer(o)->NumParameters());
  // The other stems, layouts and poolings: the estimate is what the module registers.
  VitOptions conv = o;
  conv.stem = VitStem::kConv;
  EXPECT_EQ(VitParameterCount(conv), VisionTransformer(conv)->NumParameters());
  VitOptions clip = o;
  clip.layout = VitLayout::kClip;
  EXPECT_EQ(VitParameterCount(clip), VisionTransformer(clip)->NumParameters());
  VitOptions mean = o;
  mean.pooling = VitPooling::kMean;
  EXPECT_EQ(VitParameterCount(mean), VisionTransformer(mean)->NumParameters());
}

// The device layer's case: one GPU holds a 1M-centre shard at D = 512 (vit-b16 with a 512
// projection, global batch 256, l = 8, r = 0.1). n = 10^6, m = 100 000 + 2 048 = 102 048:
// state 3 x 10^6 x 512 x 4 + 8 x 10^6 = 6 152 000 000; workspace 9 x 256 x 102 048 +
// 8 x 102 048 x 512 x 4 + 6 x 256 x 512 x 4 = 1 910 218 752.
TEST(ModelMemoryTest, AMillionCentresAtD512FitOne80GbGpu) {
  ModelMemoryPlan p;
  p.vit.image_size = 224;  // ViT-B/16 with a 512 projection
  p.vit.patch_size = 16;
  p.vit.channels = 3;
  p.vit.width = 768;
  p.vit.depth = 12;
  p.vit.heads = 12;
  p.vit.embed_dim = 512;
  p.use = ModelUse::kTraining;
  p.world = 1;
  p.global_batch = 256;
  p.batch = 256;
  p.num_classes = 1000000;
  p.sample_ratio = 0.1;
  p.labels_per_sample = 8;
  const ModelMemoryNeed need = EstimateModelMemory(p);
  EXPECT_EQ(need.class_centres, int64_t{8062218752});
  EXPECT_TRUE(CheckModelMemoryFits(p, need, int64_t{80} * 1000 * 1000 * 1000, "cuda:0").ok());
  // Half the memory does not hold it, and the refusal names a world size that would fit.
  const Status refused = CheckModelMemoryFits(p, need, int64_t{40} * 1000 * 1000 * 1000, "cuda:0");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("cuda:0"), std::string::npos) << refused.message();
}

TEST(ModelMemoryTest, TrainingAndInferenceNeedsAreWorkedByHand) {
  ModelMemoryPlan p;
  p.vit = SmallVit();
  p.use = ModelUse::kTraining;
  p.world = 2;
  p.global_batch = 10;
  p.batch = 5;
  p.num_classes = 101;
  p.sample_ratio = 0.5;
  const ModelMemoryNeed t = EstimateModelMemory(p);
  const int64_t params = kSmallVitParameters * 4;
  EXPECT_EQ(t.parameters, params);
  EXPECT_EQ(t.gradients, params);
  EXPECT_EQ(t.optimizer, 2 * params);
  // 5 images x depth 2 x ((8 + 2*2) * 17 * 8 + 2 * 2 * 17^2) x 4 bytes.
  EXPECT_EQ(t.activations, 5 * 2 * (12 * 17 * 8 + 4 * 289) * 4);
  // 51 centres of 6 with two moments (x3 float32) and step counts; m = min(51, 26 + 10 x 1)
  // = 36 sampled rows: 9 x 10 x 36 for the logits, 8 x 36 x 6 x 4 for the rows, 6 x 10 x 6 x
  // 4 for the batch.
  EXPECT_EQ(t.class_centres,
            51 * 6 * 4 * 3 + 51 * 8 + 9 * 10 * 36 + 8 * 36 * 6 * 4 + 6 * 10 * 6 * 4);
  EXPECT_EQ(t.Total(), 4 * params + t.activations + t.class_centres);

  // bf16 (autocast): the parameters' bfloat16 copies, P x 2 bytes, beside the float32 ones;
  // bf16-activations: those copies, and every activation at 2 bytes instead of 4.
  p.precision = Precision::kBf16;
  const ModelMemoryNeed autocast = EstimateModelMemory(p);
  EXPECT_EQ(autocast.parameters, params + kSmallVitParameters * 2);
  EXPECT_EQ(autocast.gradients, params);
  EXPECT_EQ(autocast.activations, t.activations);
  p.precision = Precision::kBf16Activations;
  const ModelMemoryNeed bf16 = EstimateModelMemory(p);
  EXPECT_EQ(bf16.parameters, params + kSmallVitParameters * 2);
  EXPECT_EQ(bf16.optimizer, 2 * params);
  EXPECT_EQ(bf16.activations, 5 * 2 * (12 * 17 * 8 + 4 * 289) * 2);
  EXPECT_EQ(bf16.class_centres, t.class_centres);

  p.use = ModelUse::kInference;
  const ModelMemoryNeed i = EstimateModelMemory(p);
  EXPECT_EQ(i.parameters, params);
  EXPECT_EQ(i.gradients + i.optimizer + i.class_centres, 0);
  // 5 images x (17 x (7 x 8 + 2 x 16) + 2 x 17^2) x 4 bytes.
  EXPECT_EQ(i.activations, 5 * (17 * 88 + 2 * 289) * 4);

  p.use = ModelUse::kExport;
  const ModelMemoryNeed e = EstimateModelMemory(p);
  EXPECT_EQ(e.Total(), 2 * params);
}

TEST(ModelMemoryTest, RefusalNamesThePartsTheFreeBytesAndWhatFits) {
  ModelMemoryPlan p;
  p.vit = SmallVit();
  p.use = ModelUse::kInference;
  p.batch = 1000;
  const ModelMemoryNeed need = EstimateModelMemory(p);
  EXPECT_TRUE(CheckModelMemoryFits(p, need, need.Total(), "this host").ok());
  EXPECT_TRUE(CheckModelMemoryFits(p, need, -1, "this host").ok());  // unknown

  // Two ranks on the host: each gets half, which is less than the need.
  p.ranks_on_host = 2;
  Status s = CheckModelMemoryFits(p, need, need.Total() + 2, "this host");
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  const std::string m = s.message();
  EXPECT_NE(m.find("parameters"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(kSmallVitParameters) + " float32"), std::string::npos) << m;
  EXPECT_NE(m.find("activations"), std::string::npos) << m;
  EXPECT_NE(m.find("1000 images of 17 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("shared by 2 ranks"), std::string::npos) << m;
  // Half the free bytes hold the parameters and (share - parameters) / per-image bytes images.
  const int64_t per_image = (17 * 88 + 2 * 289) * 4;
  const int64_t fits = ((need.Total() + 2) / 2 - need.parameters) / per_image;
  EXPECT_NE(m.find("a batch size of at most " + std::to_string(fits)), std::string::npos) << m;

  // Training that does not fit one rank: the world size that would.
  p.use = ModelUse::kTraining;
  p.ranks_on_host = 1;
  p.world = 1;
  p.global_batch = 64;
  p.batch = 64;
  p.num_classes = 1000;
  const ModelMemoryNeed train = EstimateModelMemory(p);
  const int64_t free_bytes = train.Total() * 2 / 3;
  s = CheckModelMemoryFits(p, train, free_bytes, "this host");
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  int world = 2;
  for (; world < 1024; ++world) {
    ModelMemoryPlan q = p;
    q.world = world;
    q.batch = (64 + world - 1) / world;
    if (EstimateModelMemory(q).Total() <= free_bytes) break;
  }
  EXPECT_NE(s.message().find("a world size of " + std::to_string(world) + " would fit"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("AdamW moments"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("class-centre shard"), std::string::npos) << s.message();

  // A model that cannot fit at all says so.
  s = CheckModelMemoryFits(p, train, train.parameters, "this host");
  EXPECT_NE(s.message().find("the model alone"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mlcd::worker
