#include "worker/eval/knn.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>

namespace mlcd::worker {

StatusOr<KnnResult> KnnClassify(const FeatureMatrix& train,
                                const std::vector<int64_t>& train_labels,
                                const FeatureMatrix& queries,
                                const std::vector<int64_t>& query_labels,
                                const KnnOptions& options) {
  auto start = std::chrono::steady_clock::now();
  if (train.rows <= 0 || train.cols <= 0 ||
      static_cast<int64_t>(train.values.size()) != train.rows * train.cols)
    return Status::InvalidArgument("kNN: the training feature matrix is empty or malformed");
  if (queries.cols != train.cols ||
      static_cast<int64_t>(queries.values.size()) != queries.rows * queries.cols)
    return Status::InvalidArgument("kNN: query features have dimension " +
                                   std::to_string(queries.cols) + ", training features " +
                                   std::to_string(train.cols));
  if (static_cast<int64_t>(train_labels.size()) != train.rows)
    return Status::InvalidArgument("kNN: " + std::to_string(train_labels.size()) +
                                   " training labels for " + std::to_string(train.rows) + " rows");
  if (!query_labels.empty() && static_cast<int64_t>(query_labels.size()) != queries.rows)
    return Status::InvalidArgument("kNN: " + std::to_string(query_labels.size()) +
                                   " query labels for " + std::to_string(queries.rows) + " rows");
  if (options.k < 1)
    return Status::InvalidArgument("kNN: k must be >= 1, got " + std::to_string(options.k));
  if (!(options.temperature > 0) || !std::isfinite(options.temperature))
    return Status::InvalidArgument("kNN: temperature must be > 0");
  if (options.query_block_rows < 1 || options.train_block_rows < 1)
    return Status::InvalidArgument("kNN: block sizes must be >= 1");
  for (int64_t v : train_labels)
    if (v < 0) return Status::InvalidArgument("kNN: negative training label " + std::to_string(v));
  for (int64_t v : query_labels)
    if (v < 0) return Status::InvalidArgument("kNN: negative query label " + std::to_string(v));
  int num_classes = options.num_classes > 0
                        ? options.num_classes
                        : std::max(NumClassesOf(train_labels), NumClassesOf(query_labels));
  for (int64_t v : train_labels)
    if (v >= num_classes)
      return Status::InvalidArgument("kNN: training label " + std::to_string(v) +
                                     " >= num_classes " + std::to_string(num_classes));

  KnnResult result;
  result.k = static_cast<int>(std::min<int64_t>(options.k, train.rows));
  result.predictions.assign(static_cast<size_t>(queries.rows), 0);
  const int k = result.k;

  auto tensor_of = [](const FeatureMatrix& m, bool normalize) {
    at::Tensor t = at::from_blob(const_cast<float*>(m.values.data()), {m.rows, m.cols}, at::kFloat);
    if (!normalize) return t;
    at::Tensor norms = t.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-30);
    return t / norms;  // a normalised copy
  };
  at::Tensor x = tensor_of(train, options.normalize);
  at::Tensor q_all = tensor_of(queries, options.normalize);
  const double inv_t = 1.0 / options.temperature;

  for (int64_t q0 = 0; q0 < queries.rows; q0 += options.query_block_rows) {
    int64_t q1 = std::min(queries.rows, q0 + options.query_block_rows);
    at::Tensor q = q_all.slice(0, q0, q1);
    at::Tensor best_sim, best_idx;  // [qb, <=k]
    for (int64_t t0 = 0; t0 < train.rows; t0 += options.train_block_rows) {
      int64_t t1 = std::min(train.rows, t0 + options.train_block_rows);
      at::Tensor sims = at::mm(q, x.slice(0, t0, t1).t());  // [qb, tb]
      int64_t kk = std::min<int64_t>(k, t1 - t0);
      at::Tensor vals, idx;
      std::tie(vals, idx) = at::topk(sims, kk, /*dim=*/1, /*largest=*/true, /*sorted=*/false);
      idx = idx + t0;
      if (!best_sim.defined()) {
        best_sim = vals;
        best_idx = idx;
      } else {
        at::Tensor cat_sim = at::cat({best_sim, vals}, 1), cat_idx = at::cat({best_idx, idx}, 1);
        int64_t keep = std::min<int64_t>(k, cat_sim.size(1));
        at::Tensor sel;
        std::tie(best_sim, sel) = at::topk(cat_sim, keep, 1, true, false);
        best_idx = cat_idx.gather(1, sel);
      }
    }
    best_sim = best_sim.contiguous();
    best_idx = best_idx.contiguous();
    const float* sp = best_sim.data_ptr<float>();
    const int64_t* ip = best_idx.data_ptr<int64_t>();
    const int64_t kept = best_sim.size(1);
    std::vector<double> votes(static_cast<size_t>(num_classes));
    for (int64_t r = 0; r < q1 - q0; ++r) {
      std::fill(votes.begin(), votes.end(), 0.0);
      for (int64_t j = 0; j < kept; ++j)
        votes[train_labels[ip[r * kept + j]]] +=
            std::exp(static_cast<double>(sp[r * kept + j]) * inv_t);
      int best = 0;
      for (int c = 1; c < num_classes; ++c)
        if (votes[c] > votes[best]) best = c;
      result.predictions[q0 + r] = best;
    }
  }
  if (!query_labels.empty()) {
    int64_t correct = 0;
    for (int64_t i = 0; i < queries.rows; ++i) correct += result.predictions[i] == query_labels[i];
    result.accuracy = static_cast<double>(correct) / static_cast<double>(queries.rows);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mlcd::worker
