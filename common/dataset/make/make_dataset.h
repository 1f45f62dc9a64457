// `mlcdctl dataset make`: writes a generated dataset with known labels or attributes as
// WebDataset shards, a train and a test split, each with its annotations.json and its dataset
// index, ready for a job (docs/data.md, "Generated datasets"):
//
//   DIR/dataset.json           what was made: kind, seed, counts, image shape
//   DIR/train/00000.tar ...    shards of samples <key>.png plus the annotation members
//   DIR/train/annotations.json the label count or the attributes (annotation_files.h)
//   DIR/train-index/           the dataset index of the train shards (dataset.index)
//   DIR/test/..., DIR/test-index/   the same for the test split (dataset.test_index)
//   DIR/train-labels.jsonl     fashion-mosaic only: the train label sets by key, for
//                              `mlcdctl labels import --jsonl ... --index DIR/train-index`
//
// Kinds: fashion-mosaic (label sets), trifeature (shape, texture, colour), fashion-tint
// (class, colour); fashion-tint and trifeature also write `<key>.cls`, the harder attribute
// (class; shape), so the single-class evaluation has a target. Sample i of a split depends on
// the seed, the kind, the split and i only; the pixels, labels and keys are the same on every
// machine (the PNG bytes also depend on zlib).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dataset/annotations.h"
#include "common/idx.h"
#include "common/status.h"

namespace mlcd {

// The kind of a generated dataset, parsed once from the command line.
enum class GeneratedKind { kFashionMosaic, kTrifeature, kFashionTint };
StatusOr<GeneratedKind> ParseGeneratedKind(const std::string& name);
const char* GeneratedKindName(GeneratedKind kind);
const std::vector<std::string>& GeneratedKindNames();

struct MakeDatasetOptions {
  GeneratedKind kind = GeneratedKind::kFashionMosaic;
  // The output directory; created when missing, refused when it already holds a dataset.
  std::string out;
  uint64_t seed = 0;
  // Samples of each split, in [1, kMaxGeneratedSamples] (fashion-tint: at most the split's
  // Fashion-MNIST images, 60000 and 10000).
  int64_t train = 1000;
  int64_t test = 200;
  // Samples per shard, in [1, kMaxGeneratedSamples].
  int64_t samples_per_shard = 1000;
  // Trifeature's image side, in [kMinTrifeatureImageSize, kMaxTrifeatureImageSize]; 0 = 32.
  // The Fashion-MNIST kinds have fixed sides (56 mosaics, 28 tint): 0 only.
  int image_size = 0;
  std::string fashion_mnist_dir = kFashionMnistDir;
};

struct MadeSplit {
  std::string shard_dir, index_dir;
  std::vector<std::string> shards;
  int64_t samples = 0;
};

struct MadeDataset {
  MadeSplit train, test;
  // The declared annotations (no per-sample values).
  DatasetAnnotations declared;
  int image_size = 0, channels = 0;
  // fashion-mosaic: DIR/train-labels.jsonl; empty otherwise.
  std::string train_labels_jsonl;
};

// The SplitMix64 stream of `split` ("train" / "test") of a kind and seed: sample i's draws
// are the stream StreamSeed(stream, i) (the generators' Draw* functions).
uint64_t SplitStreamSeed(GeneratedKind kind, uint64_t seed, const std::string& split);

// Makes the dataset. INVALID_ARGUMENT naming the option that is out of range or the output
// directory that already holds a dataset; NOT_FOUND with the install hint when Fashion-MNIST
// is missing (the Fashion-MNIST kinds); the shard writer's and the indexer's errors.
StatusOr<MadeDataset> MakeDataset(const MakeDatasetOptions& options);

}  // namespace mlcd
