// Helpers of the training tests: a real mlcd-labelstore process, label sets from real FAISS
// k-means over Fashion-MNIST pixels, small job specs, and progress-event files.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "tests/testing/process.h"

namespace mlcd::worker::train_testing {

// mlcd-labelstore on a free loopback port with its data under dir/labelstore.
class LabelStoreProcess {
 public:
  Status Start(const mlcd::testing::TempDir& dir);
  const std::string& address() const { return address_; }
  mlcd::testing::ChildProcess& process() { return process_; }

 private:
  std::string address_;
  mlcd::testing::ChildProcess process_;
};

// Writes and seals label set `name`: spherical k-means (FAISS, `k` centres, 10 iterations)
// over the L2-normalised pixels of the first `n` Fashion-MNIST training images, then each
// image's `l` most similar centres. Sample ids 0..n-1 except those in `skip`.
Status WriteKMeansLabelSet(const std::string& address, const std::string& name, int64_t n, int k,
                           int l, const std::vector<int64_t>& skip = {});

// A small CPU job: Fashion-MNIST subset of n images, a ViT of width 32, depth 1, 2 heads,
// embedding 32; k, l, global batch, epochs as given; MLCD loss with r = sample_ratio.
v1::JobSpec TinySpec(int64_t n, int k, int l, int batch, int epochs, double sample_ratio = 0.5);

Status WriteSpecJson(const std::string& path, const v1::JobSpec& spec);

// Runs `mlcd-worker train` as `world` processes (ranks 0..world-1 over a rendezvous on a free
// loopback port), each with `args` plus --rank, --world-size (and --rendezvous) and
// --progress-jsonl <prefix>.r<rank>.jsonl, output in <prefix>.r<rank>.log. OK when every rank
// exits 0; otherwise INTERNAL with the failing rank's log.
Status RunTrainGang(const std::vector<std::string>& args, int world, const std::string& prefix,
                    std::chrono::seconds timeout = std::chrono::seconds(240));

// The JSON objects of a progress file, in order.
std::vector<nlohmann::json> ReadEvents(const std::string& path);
// Events of one kind.
std::vector<nlohmann::json> EventsOf(const std::vector<nlohmann::json>& events,
                                     const std::string& kind);

}  // namespace mlcd::worker::train_testing
