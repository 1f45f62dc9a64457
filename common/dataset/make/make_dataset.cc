#include "common/dataset/make/make_dataset.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/dataset/annotation_files.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/make/fashion_items.h"
#include "common/dataset/make/palette.h"
#include "common/dataset/make/png_encode.h"
#include "common/dataset/make/shard_writer.h"
#include "common/dataset/make/trifeature.h"
#include "common/dataset/webdataset.h"
#include "common/file_util.h"
#include "common/limits.h"
#include "common/random.h"

namespace mlcd {
namespace {

constexpr int kDefaultTrifeatureSize = 32;

const std::vector<std::string>& KindNames() {
  static const auto* const kNames =
      new std::vector<std::string>{"fashion-mosaic", "trifeature", "fashion-tint"};
  return *kNames;
}

template <size_t N>
std::vector<std::string> Names(const std::array<const char*, N>& names) {
  return std::vector<std::string>(names.begin(), names.end());
}

Attribute Declared(const std::string& name, std::vector<std::string> class_names) {
  Attribute a;
  a.name = name;
  a.num_classes = static_cast<int32_t>(class_names.size());
  a.class_names = std::move(class_names);
  return a;
}

std::vector<std::string> PaletteNames() {
  std::vector<std::string> names;
  for (const PaletteColour& c : kPalette) names.push_back(c.name);
  return names;
}

DatasetAnnotations DeclaredAnnotations(GeneratedKind kind) {
  DatasetAnnotations d;
  switch (kind) {
    case GeneratedKind::kFashionMosaic:
      d.labels.num_labels = kFashionClasses;
      d.labels.names = Names(kFashionClassNames);
      break;
    case GeneratedKind::kTrifeature:
      d.attributes = {Declared("shape", Names(kTrifeatureShapeNames)),
                      Declared("texture", Names(kTrifeatureTextureNames)),
                      Declared("colour", PaletteNames())};
      break;
    case GeneratedKind::kFashionTint:
      d.attributes = {Declared("class", Names(kFashionClassNames)),
                      Declared("colour", PaletteNames())};
      break;
  }
  return d;
}

bool UsesFashion(GeneratedKind kind) { return kind != GeneratedKind::kTrifeature; }

Status CheckCount(const std::string& flag, int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    return Status::InvalidArgument(flag + " " + std::to_string(value) + " is outside [1, " +
                                   std::to_string(max) + "]");
  }
  return Status::Ok();
}

Status CheckOptions(const MakeDatasetOptions& o) {
  if (o.out.empty()) return Status::InvalidArgument("--out: give the output directory");
  MLCD_RETURN_IF_ERROR(CheckCount("--train", o.train, kMaxGeneratedSamples));
  MLCD_RETURN_IF_ERROR(CheckCount("--test", o.test, kMaxGeneratedSamples));
  MLCD_RETURN_IF_ERROR(CheckCount("--shard-size", o.samples_per_shard, kMaxGeneratedSamples));
  if (o.kind == GeneratedKind::kTrifeature) {
    if (o.image_size != 0 &&
        (o.image_size < kMinTrifeatureImageSize || o.image_size > kMaxTrifeatureImageSize)) {
      return Status::InvalidArgument("--image-size " + std::to_string(o.image_size) +
                                     " is outside [" + std::to_string(kMinTrifeatureImageSize) +
                                     ", " + std::to_string(kMaxTrifeatureImageSize) + "]");
    }
  } else if (o.image_size != 0) {
    return Status::InvalidArgument(std::string("--image-size applies to trifeature only; ") +
                                   GeneratedKindName(o.kind) + " images have a fixed side (" +
                                   (o.kind == GeneratedKind::kFashionMosaic ? "56" : "28") + ")");
  }
  for (const char* part : {"dataset.json", "train", "test", "train-index", "test-index"}) {
    if (PathExists(o.out + "/" + part)) {
      return Status::InvalidArgument("--out '" + o.out + "' already holds '" + part +
                                     "'; give a new or empty directory");
    }
  }
  return Status::Ok();
}

// LoadFashionItems, with what to do when the files are missing from a directory other than
// Debian's (whose message already names the package).
StatusOr<FashionItems> LoadFashion(const std::string& dir, const std::string& split) {
  StatusOr<FashionItems> items = LoadFashionItems(dir, split);
  if (items.status().code() == StatusCode::kNotFound && dir != kFashionMnistDir) {
    return Status::NotFound(items.status().message() + "; give --fashion-mnist the directory " +
                            "of the IDX files, or install the Debian package " +
                            "dataset-fashion-mnist (" + kFashionMnistDir + ")");
  }
  return items;
}

// What one split needs to make its samples.
struct SplitMaker {
  GeneratedKind kind;
  uint64_t stream = 0;
  int image_size = 0;
  const FashionItems* items = nullptr;  // the Fashion-MNIST kinds
};

std::string Decimal(int64_t v) { return std::to_string(v); }

// Sample i's members; `labels` gets its label set (fashion-mosaic).
StatusOr<std::vector<ShardMember>> MakeSample(const SplitMaker& m, int64_t i,
                                              std::vector<int32_t>* labels) {
  std::vector<ShardMember> members;
  switch (m.kind) {
    case GeneratedKind::kFashionMosaic: {
      const std::array<int64_t, 4> tiles = DrawMosaic(m.stream, i, m.items->images.count);
      const std::vector<uint8_t> pixels = RenderMosaic(*m.items, tiles);
      MLCD_ASSIGN_OR_RETURN(std::string png, EncodePng(pixels.data(), kMosaicSide, kMosaicSide, 1));
      *labels = MosaicLabels(*m.items, tiles);
      std::string text;
      for (int32_t l : *labels) text += (text.empty() ? "" : " ") + Decimal(l);
      members = {{"png", std::move(png)}, {"labels", text + "\n"}};
      break;
    }
    case GeneratedKind::kTrifeature: {
      const TrifeatureDraw d = DrawTrifeature(m.stream, i, m.image_size);
      const std::vector<uint8_t> pixels = RenderTrifeature(d, m.image_size);
      MLCD_ASSIGN_OR_RETURN(std::string png,
                            EncodePng(pixels.data(), m.image_size, m.image_size, 3));
      members = {{"png", std::move(png)},
                 {"cls", Decimal(d.shape) + "\n"},
                 {"shape.cls", Decimal(d.shape) + "\n"},
                 {"texture.cls", Decimal(d.texture) + "\n"},
                 {"colour.cls", Decimal(d.colour) + "\n"}};
      break;
    }
    case GeneratedKind::kFashionTint: {
      const int colour = DrawTint(m.stream, i);
      const std::vector<uint8_t> pixels = RenderTint(*m.items, i, colour);
      MLCD_ASSIGN_OR_RETURN(std::string png,
                            EncodePng(pixels.data(), kFashionSide, kFashionSide, 3));
      const std::string cls = Decimal(m.items->classes[static_cast<size_t>(i)]) + "\n";
      members = {{"png", std::move(png)},
                 {"cls", cls},
                 {"class.cls", cls},
                 {"colour.cls", Decimal(colour) + "\n"}};
      break;
    }
  }
  return members;
}

StatusOr<MadeSplit> MakeSplit(const MakeDatasetOptions& o, const std::string& split, int64_t count,
                              const SplitMaker& maker, const DatasetAnnotations& declared,
                              std::string* jsonl) {
  MadeSplit made;
  made.shard_dir = o.out + "/" + split;
  made.index_dir = o.out + "/" + split + "-index";
  made.samples = count;
  MLCD_RETURN_IF_ERROR(MakeDirs(made.shard_dir));
  ShardWriter writer(made.shard_dir, o.samples_per_shard);
  char key[32];
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < count; ++i) {
    MLCD_ASSIGN_OR_RETURN(std::vector<ShardMember> members, MakeSample(maker, i, &labels));
    std::snprintf(key, sizeof(key), "%06lld", static_cast<long long>(i));
    MLCD_RETURN_IF_ERROR(writer.Add(key, members));
    if (jsonl != nullptr) {
      *jsonl += nlohmann::json({{"key", key}, {"labels", labels}}).dump() + "\n";
    }
  }
  MLCD_RETURN_IF_ERROR(writer.Close());
  made.shards = writer.shards();
  MLCD_RETURN_IF_ERROR(
      WriteFileAtomically(made.shard_dir + "/" + kAnnotationsJson, AnnotationsJson(declared)));
  MLCD_ASSIGN_OR_RETURN(DatasetIndex index, BuildWebDatasetIndex({made.shard_dir}));
  if (index.size() != count) {
    return Status::Internal("indexed " + std::to_string(index.size()) + " of the " +
                            std::to_string(count) + " samples written to '" + made.shard_dir + "'");
  }
  MLCD_RETURN_IF_ERROR(WriteDatasetIndex(index, made.index_dir));
  return made;
}

}  // namespace

StatusOr<GeneratedKind> ParseGeneratedKind(const std::string& name) {
  const auto& names = KindNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<GeneratedKind>(i);
  }
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown dataset kind '" + name + "'; one of " + all);
}

const char* GeneratedKindName(GeneratedKind kind) {
  return KindNames()[static_cast<size_t>(kind)].c_str();
}

const std::vector<std::string>& GeneratedKindNames() { return KindNames(); }

uint64_t SplitStreamSeed(GeneratedKind kind, uint64_t seed, const std::string& split) {
  return StreamSeed(StreamSeed(seed, static_cast<uint64_t>(kind)), split == "train" ? 0 : 1);
}

StatusOr<MadeDataset> MakeDataset(const MakeDatasetOptions& options) {
  MakeDatasetOptions o = options;
  MLCD_RETURN_IF_ERROR(CheckOptions(o));
  std::error_code ec;
  o.out = std::filesystem::absolute(o.out, ec).lexically_normal().string();
  while (o.out.size() > 1 && o.out.back() == '/') o.out.pop_back();
  MadeDataset made;
  made.declared = DeclaredAnnotations(o.kind);
  FashionItems train_items, test_items;
  if (UsesFashion(o.kind)) {
    MLCD_ASSIGN_OR_RETURN(train_items, LoadFashion(o.fashion_mnist_dir, "train"));
    MLCD_ASSIGN_OR_RETURN(test_items, LoadFashion(o.fashion_mnist_dir, "test"));
    if (o.kind == GeneratedKind::kFashionTint) {
      MLCD_RETURN_IF_ERROR(CheckCount("--train", o.train, train_items.images.count)
                               .WithContext("fashion-tint uses each train image once"));
      MLCD_RETURN_IF_ERROR(CheckCount("--test", o.test, test_items.images.count)
                               .WithContext("fashion-tint uses each test image once"));
    }
  }
  switch (o.kind) {
    case GeneratedKind::kFashionMosaic:
      made.image_size = kMosaicSide;
      made.channels = 1;
      break;
    case GeneratedKind::kTrifeature:
      made.image_size = o.image_size == 0 ? kDefaultTrifeatureSize : o.image_size;
      made.channels = 3;
      break;
    case GeneratedKind::kFashionTint:
      made.image_size = kFashionSide;
      made.channels = 3;
      break;
  }
  MLCD_RETURN_IF_ERROR(MakeDirs(o.out));
  const bool mosaic = o.kind == GeneratedKind::kFashionMosaic;
  std::string jsonl;
  SplitMaker maker{o.kind, SplitStreamSeed(o.kind, o.seed, "train"), made.image_size, &train_items};
  MLCD_ASSIGN_OR_RETURN(
      made.train, MakeSplit(o, "train", o.train, maker, made.declared, mosaic ? &jsonl : nullptr));
  maker.stream = SplitStreamSeed(o.kind, o.seed, "test");
  maker.items = &test_items;
  MLCD_ASSIGN_OR_RETURN(made.test, MakeSplit(o, "test", o.test, maker, made.declared, nullptr));
  if (mosaic) {
    made.train_labels_jsonl = o.out + "/train-labels.jsonl";
    MLCD_RETURN_IF_ERROR(WriteFileAtomically(made.train_labels_jsonl, jsonl));
  }
  const nlohmann::json about = {
      {"kind", GeneratedKindName(o.kind)},
      {"seed", o.seed},
      {"train", o.train},
      {"test", o.test},
      {"samples_per_shard", o.samples_per_shard},
      {"image_size", made.image_size},
      {"channels", made.channels},
      {"annotations", nlohmann::json::parse(AnnotationsJson(made.declared))},
  };
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(o.out + "/dataset.json", about.dump(2) + "\n"));
  return made;
}

}  // namespace mlcd
