// mlcdctl dataset index|show|make: build and inspect dataset indexes (common/dataset/,
// docs/data.md), and make generated datasets with known labels (common/dataset/make/). The index is built on this machine, reading the dataset's files directly;
// build it where the files are (shared storage in a cluster) and give its directory as the
// job's dataset.index.
//
//   mlcdctl dataset index --format webdataset --path 'shards/train-{00000..00099}.tar' --out idx
//   mlcdctl dataset index --format image-folder --path photos/ --out idx
//   mlcdctl dataset show idx            # counts, classes, fingerprint check
//   mlcdctl dataset make fashion-mosaic --out DIR --seed 1 --train 1000 --test 200
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "client/cli.h"
#include "common/dataset/annotation_files.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/make/make_dataset.h"
#include "common/enums.h"

namespace mlcd::cli {
namespace {

struct IndexOptions {
  std::string format;
  std::vector<std::string> paths;
  std::string out;
};

void PrintIndex(const Context& ctx, const DatasetIndex& index, const std::string& dir,
                double seconds) {
  if (ctx.format() == OutputFormat::kJson) {
    nlohmann::json j = {{"index", dir},
                        {"format", DatasetFormatName(index.format)},
                        {"samples", index.samples.size()},
                        {"files", index.files.size()},
                        {"classes", index.classes.size()},
                        {"skipped", index.skipped}};
    if (seconds >= 0) j["seconds"] = seconds;
    if (!index.annotations.empty()) {
      j["annotations"] = nlohmann::json::parse(AnnotationsJson(index.annotations));
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("index     %s\n", dir.c_str());
  std::printf("dataset   %s\n", index.Describe().c_str());
  if (index.skipped) {
    std::printf("skipped   %llu files or samples without an image\n",
                static_cast<unsigned long long>(index.skipped));
  }
  if (seconds >= 0) std::printf("built in  %s\n", FormatDuration(seconds).c_str());
}

int RunIndex(Context& ctx, const IndexOptions& o) {
  StatusOr<DatasetFormat> format = ParseDatasetFormat(o.format);
  if (!format.ok()) return ctx.Fail(format.status());
  const auto start = std::chrono::steady_clock::now();
  StatusOr<DatasetIndex> index = BuildDatasetIndex(*format, o.paths);
  if (!index.ok()) return ctx.Fail(index.status());
  Status written = WriteDatasetIndex(*index, o.out);
  if (!written.ok()) return ctx.Fail(written);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintIndex(ctx, *index, o.out, seconds);
  return kExitOk;
}

struct MakeOptions {
  std::string kind;
  MakeDatasetOptions make;
};

int RunMake(Context& ctx, MakeOptions o) {
  StatusOr<GeneratedKind> kind = ParseGeneratedKind(o.kind);
  if (!kind.ok()) return ctx.Fail(kind.status());
  o.make.kind = *kind;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<MadeDataset> made = MakeDataset(o.make);
  if (!made.ok()) return ctx.Fail(made.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ctx.format() == OutputFormat::kJson) {
    nlohmann::json j = {{"kind", o.kind},
                        {"train_index", made->train.index_dir},
                        {"test_index", made->test.index_dir},
                        {"train_shards", made->train.shard_dir},
                        {"test_shards", made->test.shard_dir},
                        {"train", made->train.samples},
                        {"test", made->test.samples},
                        {"image_size", made->image_size},
                        {"channels", made->channels},
                        {"seconds", seconds}};
    if (!made->train_labels_jsonl.empty()) j["train_labels"] = made->train_labels_jsonl;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("made        %s: %lld train and %lld test images of %dx%dx%d in %s\n", o.kind.c_str(),
              static_cast<long long>(made->train.samples),
              static_cast<long long>(made->test.samples), made->image_size, made->image_size,
              made->channels, FormatDuration(seconds).c_str());
  std::printf("annotations %s\n", made->declared.Describe().c_str());
  std::printf("train       %s (index %s)\n", made->train.shard_dir.c_str(),
              made->train.index_dir.c_str());
  std::printf("test        %s (index %s)\n", made->test.shard_dir.c_str(),
              made->test.index_dir.c_str());
  if (!made->train_labels_jsonl.empty()) {
    std::printf("labels      %s\n", made->train_labels_jsonl.c_str());
    std::printf("import with mlcdctl labels import --name NAME --k %d --jsonl %s --index %s\n",
                made->declared.labels.num_labels, made->train_labels_jsonl.c_str(),
                made->train.index_dir.c_str());
  }
  return kExitOk;
}

int RunShow(Context& ctx, const std::string& dir) {
  StatusOr<DatasetIndex> index = LoadDatasetIndex(dir, /*check_fingerprint=*/true);
  if (!index.ok()) return ctx.Fail(index.status());
  PrintIndex(ctx, *index, dir, -1);
  if (ctx.format() == OutputFormat::kText) {
    std::printf("files     unchanged since indexing (sizes and mtimes match)\n");
  }
  return kExitOk;
}

CommandRegistration reg(35, [](CLI::App& app, Context& ctx) {
  auto* dataset = app.add_subcommand(
      "dataset", "Dataset indexes: the persisted list of images that fixes every sample id");
  dataset->require_subcommand(1);
  auto o = std::make_shared<IndexOptions>();
  auto* index = dataset->add_subcommand(
      "index",
      "Index an image folder or WebDataset shards (libarchive records each member's offset).\n"
      "  mlcdctl dataset index --format webdataset --path 'train-{00000..00099}.tar' --out IDX\n"
      "  mlcdctl dataset index --format image-folder --path photos/ --out IDX");
  index->add_option("--format", o->format, "image-folder or webdataset")->required();
  index
      ->add_option("--path", o->paths,
                   "image-folder: the root; webdataset: shards, directories of .tar files or "
                   "brace patterns (repeatable)")
      ->required();
  index->add_option("--out", o->out, "directory to write the index into")->required();
  index->callback([&ctx, o] { ctx.exit_code = RunIndex(ctx, *o); });
  auto dir = std::make_shared<std::string>();
  auto* show = dataset->add_subcommand(
      "show", "Describe an index and check its fingerprint against the dataset's files");
  show->add_option("dir", *dir, "index directory")->required();
  show->callback([&ctx, dir] { ctx.exit_code = RunShow(ctx, *dir); });
  auto m = std::make_shared<MakeOptions>();
  auto* make = dataset->add_subcommand(
      "make",
      "Make a dataset with known labels or attributes: WebDataset shards of PNG images with\n"
      "annotation members, a train and a test split, each with its dataset index.\n"
      "  mlcdctl dataset make fashion-mosaic --out DIR --seed 1 --train 1000 --test 200\n"
      "  mlcdctl dataset make trifeature --out DIR --image-size 32\n"
      "  mlcdctl dataset make fashion-tint --out DIR");
  make->add_option("kind", m->kind, "fashion-mosaic, trifeature or fashion-tint")->required();
  make->add_option("--out", m->make.out, "new directory to write the dataset into")->required();
  make->add_option("--seed", m->make.seed, "seed of every draw (default 0)");
  make->add_option("--train", m->make.train, "train images (default 1000)");
  make->add_option("--test", m->make.test, "test images (default 200)");
  make->add_option("--shard-size", m->make.samples_per_shard, "images per shard (default 1000)");
  make->add_option("--image-size", m->make.image_size, "trifeature: image side (default 32)");
  make->add_option("--fashion-mnist", m->make.fashion_mnist_dir,
                   "Fashion-MNIST IDX directory (default /usr/share/datasets/fashion-mnist)");
  make->callback([&ctx, m] { ctx.exit_code = RunMake(ctx, *m); });
});

}  // namespace
}  // namespace mlcd::cli
