// Inputs crafted to break the readers and the spec validation: each test
// reproduces one finding and asserts the fix.
#include <grpcpp/support/status.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "common/error_message.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/job_spec.h"
#include "common/limits.h"
#include "common/npy.h"
#include "common/spec_validation.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

std::string BigEndian(uint32_t v) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(v >> 24);
  s[1] = static_cast<char>(v >> 16);
  s[2] = static_cast<char>(v >> 8);
  s[3] = static_cast<char>(v);
  return s;
}

std::string IdxImagesHeader(uint32_t count, uint32_t rows, uint32_t cols) {
  return BigEndian(0x803) + BigEndian(count) + BigEndian(rows) + BigEndian(cols);
}

void WriteGzip(const std::string& path, const std::string& head, size_t zeros) {
  gzFile f = gzopen(path.c_str(), "wb9");
  ASSERT_TRUE(f);
  gzwrite(f, head.data(), static_cast<unsigned>(head.size()));
  std::string block(1 << 20, '\0');
  for (size_t done = 0; done < zeros; done += block.size())
    gzwrite(f, block.data(), static_cast<unsigned>(std::min(block.size(), zeros - done)));
  gzclose(f);
}

// Before: count * rows * cols overflowed size_t, the truncation check passed and
// vector::assign threw std::length_error out of the clustering thread (a crash, then a crash
// loop on every restart).
TEST(HardeningIdx, OverflowingHeaderIsAnErrorNotAnException) {
  testing::TempDir dir;
  const std::string path = dir.Sub("evil-idx3-ubyte");
  // 2^32-1 images of 2^32-1 x 2^32-1 pixels: the 64-bit product wraps.
  ASSERT_TRUE(
      WriteFileAtomically(path, IdxImagesHeader(0xffffffffu, 0xffffffffu, 0xffffffffu) + "abc")
          .ok());
  StatusOr<IdxImages> images(Status::Internal("not run"));
  EXPECT_NO_THROW(images = ReadIdxImages(path));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument) << images.status().ToString();
  // A product that wraps to a small number exactly (2^32 * 2^32 = 2^64 = 0 mod 2^64 needs
  // 33-bit sides; 2^16 * 2^16 * 2^32-1 does not wrap but is far beyond any bound).
  ASSERT_TRUE(WriteFileAtomically(path, IdxImagesHeader(0xffffffffu, 65536, 65536) + "abc").ok());
  EXPECT_NO_THROW(images = ReadIdxImages(path));
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  // Sides within bounds, count too many for the byte bound.
  ASSERT_TRUE(WriteFileAtomically(path, IdxImagesHeader(0xffffffffu, 4096, 4096) + "abc").ok());
  EXPECT_NO_THROW(images = ReadIdxImages(path));
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(images.status().message().find("more than the"), std::string::npos)
      << images.status().message();
}

// Before: a gzipped IDX file was decompressed whole, whatever its size. Now the reader stops
// at what the header (and limit) needs: a 64 MiB bomb with a 1-image header reads 784 bytes.
TEST(HardeningIdx, GzipIsDecompressedOnlyAsFarAsTheHeaderNeeds) {
  testing::TempDir dir;
  const std::string path = dir.Sub("bomb-idx3-ubyte.gz");
  WriteGzip(path, IdxImagesHeader(1, 28, 28), size_t{64} << 20);
  auto images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status().ToString();
  EXPECT_EQ(images->count, 1);
  EXPECT_EQ(images->pixels.size(), 784u);
  // A header promising more than the data: truncated, named as such.
  WriteGzip(path, IdxImagesHeader(1000, 28, 28), 784 * 10);
  images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), StatusCode::kDataLoss);
  // The limit reads only the first images of a header's count.
  images = ReadIdxImages(path, 5);
  ASSERT_TRUE(images.ok()) << images.status().ToString();
  EXPECT_EQ(images->pixels.size(), 5u * 784);
}

// Before: the first 'shape' substring was taken, even inside another key.
TEST(HardeningNpy, ShapeIsTakenOnlyAsAKey) {
  testing::TempDir dir;
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'myshape': (1000000, 1000000), "
      "'shape': (2,), }";
  std::string padded = dict;
  padded.append((64 - (10 + padded.size() + 1) % 64) % 64, ' ');
  padded.push_back('\n');
  std::string file("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(padded.size() & 0xff));
  file.push_back(static_cast<char>(padded.size() >> 8));
  file += padded + std::string(8, '\0');
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("a.npy"), file).ok());
  auto m = MappedNpy::Open(dir.Sub("a.npy"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->header().shape, std::vector<int64_t>({2}));
  // 'shape' only inside a value: no shape key at all.
  const std::string no_key = "{'descr': '<f4', 'fortran_order': False, 'x': 'shape: (2,)', }";
  padded = no_key;
  padded.append((64 - (10 + padded.size() + 1) % 64) % 64, ' ');
  padded.push_back('\n');
  file = std::string("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(padded.size() & 0xff));
  file.push_back(static_cast<char>(padded.size() >> 8));
  file += padded + std::string(8, '\0');
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("b.npy"), file).ok());
  EXPECT_FALSE(MappedNpy::Open(dir.Sub("b.npy")).ok());
}

// Found by fuzz_npy: a header whose length puts float16 data at an odd byte made the typed
// reads misaligned (undefined behaviour). Such files are refused; numpy never writes them.
TEST(HardeningNpy, MisalignedDataIsRefused) {
  testing::TempDir dir;
  const std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 3), }";
  std::string padded = dict + std::string(117 - dict.size() - 1, ' ') + "\n";  // data at 127
  std::string file("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(padded.size() & 0xff));
  file.push_back(static_cast<char>(padded.size() >> 8));
  file += padded + std::string(6, '\0');
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("odd.npy"), file).ok());
  std::vector<int64_t> shape;
  auto read = ReadNpyAsFloat32(dir.Sub("odd.npy"), &shape);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("the data starts at byte 127"), std::string::npos)
      << read.status().message();
}

// Found by fuzz_npy: an empty (0, 2) float32 array passed a null pointer to memcpy.
TEST(HardeningNpy, EmptyArraysReadAsEmpty) {
  testing::TempDir dir;
  const float* none = nullptr;
  ASSERT_TRUE(WriteNpy(dir.Sub("empty.npy"), NpyDtype::kFloat32, {0, 2}, none).ok());
  std::vector<int64_t> shape;
  auto f = ReadNpyAsFloat32(dir.Sub("empty.npy"), &shape);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->empty());
  EXPECT_EQ(shape, std::vector<int64_t>({0, 2}));
}

const char* kSpecHead = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: t}
spec:
)";

// Before: integers were read with strtoll base 0, so `k: 010` was octal 8.
TEST(HardeningYaml, IntegersAreBaseTen) {
  auto job = ParseJobSpecYaml(std::string(kSpecHead) + "  clustering: {k: 010, l: 4}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.clustering().k(), 10);
  auto hex = ParseJobSpecYaml(std::string(kSpecHead) + "  clustering: {k: 0x10}\n");
  ASSERT_FALSE(hex.ok());
  EXPECT_NE(hex.status().message().find("'0x10' is not a whole number"), std::string::npos)
      << hex.status().message();
}

// Before: a path holding NUL was cut at it by every c_str() user.
TEST(HardeningSpec, PathsWithNulAreRefused) {
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  spec.mutable_training()->set_checkpoint_dir(std::string("/tmp/ok\0/etc/cron.d", 19));
  spec.mutable_dataset()->set_path(std::string("/usr/share/datasets/fashion-mnist\0x", 35));
  const Status st = SpecProblemsToStatus(JobSpecProblems(spec));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("spec.training.checkpoint_dir: holds a NUL byte"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("spec.dataset.path: holds a NUL byte"), std::string::npos);
}

// Before: width, depth, embed_dim up to 2^31-1 and mlp_ratio 1e300 passed; random-projection
// dim 65536 made the features ~15.7 GB. Every size now has a bound, named in the message.
TEST(HardeningSpec, EverySizeHasAnUpperBoundInTheMessage) {
  auto job = LoadJobSpecYaml(std::string(kSpecHead) +
                             "  model: {width: 2147483647, depth: 2147483647, heads: 1, "
                             "embed_dim: 2147483647, mlp_ratio: 1e300}\n"
                             "  clustering: {k: 2147483647, l: 4, niter: 2147483647, "
                             "features: {kind: random-projection, dim: 65536}}\n"
                             "  training: {epochs_per_round: 2147483647, batch_size: 2147483647, "
                             "threads_per_worker: 100000, heartbeat_timeout_seconds: "
                             "2147483647}\n"
                             "  evaluation: {knn_k: 2147483647}\n");
  ASSERT_FALSE(job.ok());
  const std::string& m = job.status().message();
  for (const std::string& want : std::vector<std::string>{
           "spec.model.width: 2147483647 is not in [1, " + std::to_string(kMaxModelWidth) + "]",
           "spec.model.depth: 2147483647 is not in [1, " + std::to_string(kMaxModelDepth) + "]",
           "spec.model.embed_dim: 2147483647 is not in [1, " + std::to_string(kMaxEmbedDim) + "]",
           std::string("spec.model.mlp_ratio: 1e+300 is not in (0, 16]"),
           "spec.clustering.k: 2147483647 is not in [1, " + std::to_string(kMaxClusters) + "]",
           "spec.clustering.niter: 2147483647 is not in [1, " +
               std::to_string(kMaxKMeansIterations) + "]",
           "spec.clustering.features.dim: 65536 is not in [1, " +
               std::to_string(kMaxProjectionDim) + "]",
           std::string("spec.training.epochs_per_round: 2147483647 is not in [1, "),
           "spec.training.batch_size: 2147483647 is not in [1, ",
           "spec.training.threads_per_worker: 100000 is not in [0, ",
           "spec.training.heartbeat_timeout_seconds: 2147483647 is not in [1, ",
           "spec.evaluation.knn_k: 2147483647 is not in [1, "}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\nin\n" << m;
  }
  // Each field within its bound, but together too big a model.
  auto big = LoadJobSpecYaml(std::string(kSpecHead) +
                             "  model: {width: 8192, depth: 128, heads: 64, mlp_ratio: 4}\n");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("parameters ((4 + 2 * mlp_ratio) * width^2 * depth)"),
            std::string::npos)
      << big.status().message();
  // Strings and lists.
  auto list = LoadJobSpecYaml(std::string(kSpecHead) + "  model: {preset: '" +
                              std::string(kMaxSpecStringLength + 1, 'x') + "'}\n");
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("spec.model.preset: longer than 4096 bytes"),
            std::string::npos);
}

// Before: image_size 4096 with patch_size 1 (16.7M tokens per image)
// passed. Now the sequence length and the activation memory of a worker's batch are bounded,
// each message naming its numbers.
TEST(HardeningSpec, SequenceLengthAndActivationMemoryAreBounded) {
  auto tokens = LoadJobSpecYaml(std::string(kSpecHead) +
                                "  model: {image_size: 4096, patch_size: 1}\n");
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(tokens.status().message().find(
                "spec.model.image_size: image_size 4096 / patch_size 1 gives 4096^2 = 16777216 "
                "tokens per image; at most " + std::to_string(kMaxSequenceLength)),
            std::string::npos)
      << tokens.status().message();
  // 64^2 tokens pass the length bound, but 1024 images per worker of them are ~22 TB.
  auto batch = LoadJobSpecYaml(std::string(kSpecHead) +
                               "  model: {preset: vit-b32, image_size: 1024, patch_size: 16}\n"
                               "  training: {batch_size: 1024}\n");
  ASSERT_FALSE(batch.ok());
  const std::string& m = batch.status().message();
  EXPECT_NE(m.find("spec.training.batch_size: the activations of one worker's batch would take "
                   "about "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("1024 images per worker x depth 12"), std::string::npos) << m;
  EXPECT_NE(m.find("L = 4097 tokens); at most 549.756 GB"), std::string::npos) << m;
  EXPECT_EQ(m.find("spec.model.image_size"), std::string::npos) << m;
  // The same model with 8 images per worker fits.
  auto small = LoadJobSpecYaml(std::string(kSpecHead) +
                               "  model: {preset: vit-b32, image_size: 1024, patch_size: 16}\n"
                               "  training: {batch_size: 64, world_size: 8}\n"
                               "  clustering: {k: 64, l: 4}\n");
  EXPECT_TRUE(small.ok()) << small.status().ToString();
}

// Before: loader_threads up to 256 each decoded up to 300 MB at once.
// Now the threads share dataset.decode_memory_mb, which must hold 16 MiB per thread.
TEST(HardeningSpec, LoaderThreadsAreBoundedByTheDecodeMemoryBudget) {
  auto job = LoadJobSpecYaml(std::string(kSpecHead) +
                             "  dataset: {limit: 500, loader_threads: 100}\n");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find(
                "spec.dataset.loader_threads: 100 threads need at least 100 x 16 MiB = 1600 MiB "
                "of decode memory, more than decode_memory_mb 1024; use at most 64 threads"),
            std::string::npos)
      << job.status().message();
  auto raised = LoadJobSpecYaml(std::string(kSpecHead) +
                                "  dataset: {limit: 5000, loader_threads: 100, "
                                "decode_memory_mb: 1600}\n");
  EXPECT_TRUE(raised.ok()) << raised.status().ToString();
  auto huge = LoadJobSpecYaml(std::string(kSpecHead) +
                              "  dataset: {limit: 500, decode_memory_mb: 2147483647}\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("spec.dataset.decode_memory_mb: 2147483647 is not in "
                                         "[0, " + std::to_string(kMaxDecodeMemoryMb) + "]"),
            std::string::npos)
      << huge.status().message();
}

// Before: a 27 MB YAML dry run was parsed whole.
TEST(HardeningSpec, YamlTextHasASizeLimit) {
  std::string text = std::string(kSpecHead) + "  dataset: {limit: 500}\n#";
  text.append(kMaxSpecYamlBytes, 'x');
  auto job = ParseJobSpecYaml(text);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("at most " + std::to_string(kMaxSpecYamlBytes)),
            std::string::npos);
}

// Before: 1000 bad paths made an error larger than gRPC's metadata limit, and the client saw
// only "metadata size exceeds limit". Now the list is cut with a count of what was left out,
// and every gRPC error fits.
TEST(HardeningSpec, ThousandBadPathsFitAGrpcError) {
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  spec.mutable_clustering()->mutable_features()->set_kind("npy");
  for (int i = 0; i < 1000; ++i)
    spec.mutable_clustering()->mutable_features()->add_paths(
        std::string("/no/such/dir/shard-") + std::to_string(i) + std::string("\0.npy", 5));
  const Status st = SpecProblemsToStatus(JobSpecProblems(spec));
  ASSERT_FALSE(st.ok());
  EXPECT_LE(st.message().size(), kMaxErrorMessageBytes);
  EXPECT_NE(st.message().find("more problems left out"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().rfind("invalid job spec (", 0), 0u);
  const std::string huge(100000, 'e');
  const grpc::Status g = ToGrpcStatus(Status::InvalidArgument(huge));
  EXPECT_LE(g.error_message().size(), kMaxErrorMessageBytes + 64);
  EXPECT_NE(g.error_message().find("more bytes left out"), std::string::npos);
  EXPECT_EQ(FitErrorMessage("short"), "short");
}

}  // namespace
}  // namespace mlcd
