#include "worker/cluster/centroid_checkpoint.h"

#include <ATen/ATen.h>

#include <cstring>

#include "common/file_util.h"

namespace mlcd::worker::cluster {
namespace {

constexpr char kMagic[8] = {'M', 'L', 'C', 'D', 'K', 'M', 'C', '1'};

struct Header {
  char magic[8];
  int32_t k;
  int32_t d;
  int32_t iterations_done;
  int32_t reserved;
  uint64_t seed;
  int64_t train_rows;
};
static_assert(sizeof(Header) == 40, "checkpoint header layout");

}  // namespace

Status SaveCentroidCheckpoint(const std::string& path, const CentroidCheckpoint& checkpoint) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.k = checkpoint.k;
  h.d = checkpoint.d;
  h.iterations_done = checkpoint.iterations_done;
  h.seed = checkpoint.seed;
  h.train_rows = checkpoint.train_rows;
  at::Tensor c = checkpoint.centroids.to(at::kCPU, at::kFloat).contiguous();
  if (c.dim() != 2 || c.size(0) != h.k || c.size(1) != h.d)
    return Status::InvalidArgument("centroid checkpoint: centroids are not k x d");
  return WriteFileAtomically(
      path, {{&h, sizeof(h)}, {c.data_ptr(), static_cast<size_t>(c.numel()) * sizeof(float)}});
}

StatusOr<std::optional<CentroidCheckpoint>> LoadCentroidCheckpoint(
    const std::string& path, const CentroidCheckpoint& expect) {
  if (!PathExists(path)) return std::optional<CentroidCheckpoint>();
  MLCD_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  Header h{};
  if (bytes.size() < sizeof(h))
    return Status::InvalidArgument("centroid checkpoint " + path + ": shorter than its header");
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0)
    return Status::InvalidArgument("centroid checkpoint " + path + ": not a checkpoint file");
  const size_t body = static_cast<size_t>(expect.k) * expect.d * sizeof(float);
  if (h.k != expect.k || h.d != expect.d || h.seed != expect.seed ||
      h.train_rows != expect.train_rows) {
    return Status::FailedPrecondition(
        "centroid checkpoint " + path + " is of another run (k = " + std::to_string(h.k) +
        ", d = " + std::to_string(h.d) + ", seed = " + std::to_string(h.seed) +
        ", training rows = " + std::to_string(h.train_rows) + "; this run has k = " +
        std::to_string(expect.k) + ", d = " + std::to_string(expect.d) + ", seed = " +
        std::to_string(expect.seed) + ", training rows = " + std::to_string(expect.train_rows) +
        "); delete it to start over");
  }
  if (bytes.size() != sizeof(h) + body || h.iterations_done < 0)
    return Status::InvalidArgument("centroid checkpoint " + path + ": size " +
                                   std::to_string(bytes.size()) + " bytes, expected " +
                                   std::to_string(sizeof(h) + body));
  CentroidCheckpoint out = expect;
  out.iterations_done = h.iterations_done;
  out.centroids = at::empty({expect.k, expect.d}, at::kFloat);
  std::memcpy(out.centroids.data_ptr(), bytes.data() + sizeof(h), body);
  return std::optional<CentroidCheckpoint>(std::move(out));
}

}  // namespace mlcd::worker::cluster
