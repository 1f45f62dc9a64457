#include "tests/worker_train/train_testing.h"

#include <sys/wait.h>

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <set>

#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/net.h"

namespace mlcd::worker::train_testing {

Status LabelStoreProcess::Start(const mlcd::testing::TempDir& dir) {
  address_ = "127.0.0.1:" + std::to_string(PickFreePort());
  MLCD_RETURN_IF_ERROR(process_.Start(
      mlcd::testing::BinPath("mlcd-labelstore"),
      {"--listen", address_, "--metrics-listen", "", "--data-dir", dir.Sub("labelstore")},
      dir.Sub("labelstore.log")));
  return mlcd::testing::WaitForServing(address_, std::chrono::seconds(30));
}

Status WriteKMeansLabelSet(const std::string& address, const std::string& name, int64_t n, int k,
                           int l, const std::vector<int64_t>& skip) {
  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(FindMnistSplit(kFashionMnistDir, "train", &images_path, &labels_path));
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path, n));
  const int d = images.rows * images.cols;
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (int64_t i = 0; i < n; ++i) {
    double norm = 0;
    for (int j = 0; j < d; ++j) {
      float v = images.pixels[static_cast<size_t>(i * d + j)] / 255.0f;
      x[static_cast<size_t>(i * d + j)] = v;
      norm += double(v) * v;
    }
    const float inv = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    for (int j = 0; j < d; ++j) x[static_cast<size_t>(i * d + j)] *= inv;
  }
  faiss::ClusteringParameters cp;
  cp.niter = 10;
  cp.spherical = true;
  cp.seed = 1234;
  cp.min_points_per_centroid = 1;
  cp.verbose = false;
  faiss::Clustering clustering(d, k, cp);
  faiss::IndexFlatIP index(d);
  clustering.train(n, x.data(), index);
  std::vector<float> scores(static_cast<size_t>(n) * l);
  std::vector<faiss::Index::idx_t> nearest(static_cast<size_t>(n) * l);
  index.search(n, x.data(), l, scores.data(), nearest.data());

  std::set<int64_t> skipped(skip.begin(), skip.end());
  std::vector<uint64_t> ids;
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < n; ++i) {
    if (skipped.count(i)) continue;
    ids.push_back(static_cast<uint64_t>(i));
    for (int j = 0; j < l; ++j)
      rows.push_back(static_cast<int32_t>(nearest[static_cast<size_t>(i * l + j)]));
  }
  labelstore::LabelStoreClient client(address);
  labelstore::LabelSetSpec spec;
  spec.name = name;
  spec.num_classes = k;
  spec.labels_per_sample = l;
  MLCD_RETURN_IF_ERROR(client.CreateLabelSet(spec).status());
  MLCD_RETURN_IF_ERROR(client.WriteLabels(name, ids.data(), ids.size(), l, rows.data()).status());
  return client.Seal(name).status();
}

v1::JobSpec TinySpec(int64_t n, int k, int l, int batch, int epochs, double sample_ratio) {
  v1::JobSpec spec;
  spec.mutable_dataset()->set_limit(static_cast<uint64_t>(n));
  spec.mutable_clustering()->set_k(k);
  spec.mutable_clustering()->set_l(l);
  auto* m = spec.mutable_model();
  m->set_preset("vit-tiny");
  m->set_width(32);
  m->set_depth(1);
  m->set_heads(2);
  m->set_embed_dim(32);
  spec.mutable_loss()->set_sample_ratio(sample_ratio);
  auto* t = spec.mutable_training();
  t->set_batch_size(batch);
  t->set_epochs_per_round(epochs);
  t->set_seed(42);
  t->set_threads_per_worker(1);
  t->set_collective_timeout_seconds(60);
  spec.mutable_optimizer()->set_lr(2e-3);
  spec.mutable_optimizer()->set_warmup_fraction(0.1);
  return spec;
}

Status WriteSpecJson(const std::string& path, const v1::JobSpec& spec) {
  std::string text;
  auto st = google::protobuf::util::MessageToJsonString(spec, &text);
  if (!st.ok()) return Status::Internal(st.ToString());
  return WriteFileAtomically(path, text);
}

Status RunTrainGang(const std::vector<std::string>& args, int world, const std::string& prefix,
                    std::chrono::seconds timeout) {
  const std::string store = "127.0.0.1:" + std::to_string(PickFreePort());
  std::vector<std::unique_ptr<mlcd::testing::ChildProcess>> gang;
  for (int rank = 0; rank < world; ++rank) {
    const std::string me = prefix + ".r" + std::to_string(rank);
    std::vector<std::string> argv = {"train",
                                     "--rank",
                                     std::to_string(rank),
                                     "--world-size",
                                     std::to_string(world),
                                     "--progress-jsonl",
                                     me + ".jsonl"};
    if (world > 1) argv.insert(argv.end(), {"--rendezvous", store});
    argv.insert(argv.end(), args.begin(), args.end());
    gang.push_back(std::make_unique<mlcd::testing::ChildProcess>());
    MLCD_RETURN_IF_ERROR(
        gang.back()->Start(mlcd::testing::BinPath("mlcd-worker"), argv, me + ".log"));
  }
  Status result;
  for (int rank = 0; rank < world; ++rank) {
    auto& p = *gang[static_cast<size_t>(rank)];
    const int status = p.Wait(timeout);
    if (result.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      result = Status::Internal("rank " + std::to_string(rank) + " of " + prefix + " ended with " +
                                std::to_string(status) + ":\n" + p.Log());
    }
  }
  return result;
}

std::vector<nlohmann::json> ReadEvents(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<nlohmann::json> EventsOf(const std::vector<nlohmann::json>& events,
                                     const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    if (e.value("event", "") == kind) out.push_back(e);
  }
  return out;
}

}  // namespace mlcd::worker::train_testing
