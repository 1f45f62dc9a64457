// Top-l assignment: every feature row gets the l centroids of largest inner product (its
// positive labels in MLCD), best first, with those inner products as scores.
//
// Exact search is FAISS IndexFlatIP over the centroids (BLAS sgemm between a chunk of rows and
// the centroids, then a top-l heap). HNSW (IndexHNSWFlat) and IVF (IndexIVFFlat) over the
// centroids are approximate alternatives for k in the hundreds of thousands and more; their
// recall@l against exact search is measured on a sample of rows before the pass and reported.
//
// Rows are streamed from the memory-mapped shards chunk by chunk. Each chunk's result is
// handed to the caller's sink on a separate thread while the next chunk is searched, so a sink
// that writes to the label store overlaps with the search.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clients/label_batch.h"
#include "clusterd/feature_source.h"
#include "common/enums.h"
#include "common/status.h"

namespace faiss {
struct Index;
}

namespace mlcd::clusterd {

// The search method and its spellings ("exact", "hnsw", "ivf") are common/enums.h's.
using SearchMethod = mlcd::SearchMethod;
using mlcd::ParseSearchMethod;
using mlcd::SearchMethodName;

struct AssignParams {
  // Labels per row, 1 <= l <= k.
  int l = 8;
  SearchMethod method = SearchMethod::kExact;
  // HNSW: efSearch (0 = max(64, 4 * l)). IVF: nprobe (0 = max(4, nlist / 8)).
  int search_effort = 0;
  // HNSW graph degree M and build effort.
  int hnsw_m = 32;
  int hnsw_ef_construction = 80;
  // IVF lists (0 = about sqrt(k)).
  int ivf_nlist = 0;
  // Rows per search call and per batch handed to the sink.
  int64_t chunk_rows = 16384;
  // Batches that may wait for the sink while the next chunk is searched.
  int sink_queue_depth = 3;
  // OpenMP/BLAS threads (0 = all cores).
  int threads = 0;
  // Approximate methods: rows sampled to measure recall@l against exact search.
  int64_t recall_sample = 10000;
  uint64_t seed = 1234;
};

// Checks params for k centroids: INVALID_ARGUMENT saying what to change.
Status ValidateAssignParams(const AssignParams& params, int k);
// The same checks before k is known (a request is checked before it waits for its turn): all
// but those against k.
Status ValidateAssignParams(const AssignParams& params);

// The top-l result of consecutive rows is the label store's row type (clients/label_batch.h):
// labels_per_sample = l, labels and scores rows x l (centroid ids best first, their inner
// products), sample_ids the rows' sample ids.
using labelstore::LabelBatch;

// Receives batches in row order, on one thread other than the caller's; `first_row` is the
// global row of the batch's first row. A non-OK status stops the pass and is returned by
// AssignTopL.
using LabelBatchSink = std::function<Status(int64_t first_row, LabelBatch batch)>;

struct AssignCallbacks {
  // Polled between chunks (and inside FAISS searches); true ends the pass with CANCELLED.
  std::function<bool()> should_stop;
  std::function<void(const std::string&)> on_note;
  // After every chunk: rows searched so far, of `rows_total`.
  std::function<void(int64_t rows_done, int64_t rows_total)> on_progress;
};

struct AssignStats {
  int64_t rows = 0;
  int k = 0;
  int l = 0;
  double seconds = 0;         // whole pass, sink included
  double search_seconds = 0;  // in FAISS searches
  // Recall@l of the approximate method on the sample (1 for exact), and the sample size.
  double approx_recall = 1.0;
  int64_t recall_rows = 0;
  // Rows whose approximate result was incomplete (< l ids) and were searched exactly.
  int64_t exact_fallback_rows = 0;
  // Rows per centroid among the top-1 labels.
  std::vector<int64_t> top1_sizes;
};

// Searches centroids (k x d, unit rows) for the top-l of query rows.
class CentroidIndex {
 public:
  static StatusOr<std::unique_ptr<CentroidIndex>> Build(const std::vector<float>& centroids, int k,
                                                        int d, const AssignParams& params);
  ~CentroidIndex();
  // Top-l of n rows (n x d): scores and labels n x l, best first. Rows an approximate index
  // answers with fewer than l ids are searched exactly; their count is returned.
  int64_t Search(int64_t n, const float* x, int l, float* scores, int32_t* labels) const;
  // Exact top-l (IndexFlatIP) whatever the method.
  void SearchExact(int64_t n, const float* x, int l, float* scores, int32_t* labels) const;
  SearchMethod method() const { return method_; }
  int k() const { return k_; }
  int d() const { return d_; }

 private:
  CentroidIndex() = default;
  SearchMethod method_ = SearchMethod::kExact;
  int k_ = 0;
  int d_ = 0;
  std::unique_ptr<faiss::Index> exact_;
  std::unique_ptr<faiss::Index> approx_;
  std::unique_ptr<faiss::Index> ivf_quantizer_;
};

// Recall@l of index.Search against index.SearchExact on `rows` (n x d): the mean over rows of
// |approx top-l ∩ exact top-l| / l.
double MeasureRecall(const CentroidIndex& index, int64_t n, const float* rows, int l);

// The whole pass over `shards`. `sink` may be empty (e.g. only the sizes are wanted).
StatusOr<AssignStats> AssignTopL(const FeatureShards& shards, const std::vector<float>& centroids,
                                 int k, const AssignParams& params,
                                 const AssignCallbacks& callbacks, const LabelBatchSink& sink);

// Reads a centroids .npy (float32/float16/float64, k x d), checks d against `expected_d` (0 =
// any) and every value is finite and no row is zero, and L2-normalises the rows.
StatusOr<std::vector<float>> LoadCentroids(const std::string& path, int expected_d, int* k, int* d);

struct ClusterSizeSummary {
  int64_t min = 0;
  int64_t max = 0;
  double mean = 0;
  double stddev = 0;
  int64_t empty_clusters = 0;
  // k * sum(size^2) / n^2, as FAISS defines it (1 = balanced).
  double imbalance_factor = 0;
};
ClusterSizeSummary SummarizeClusterSizes(const std::vector<int64_t>& sizes);

}  // namespace mlcd::clusterd
