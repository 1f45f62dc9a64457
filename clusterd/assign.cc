#include "clusterd/assign.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/impl/FaissException.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "clusterd/compute_env.h"
#include "clusterd/kmeans.h"
#include "common/limits.h"
#include "common/mutex.h"
#include "common/npy.h"
#include "common/stopwatch.h"

namespace mlcd::clusterd {
namespace {

int DefaultNlist(int k) {
  return std::max(1, std::min(k, static_cast<int>(std::lround(std::sqrt(static_cast<double>(k))))));
}

// Runs the sink on its own thread over a bounded queue of batches.
class SinkPipeline {
 public:
  SinkPipeline(const LabelBatchSink& sink, int depth) : sink_(sink), depth_(std::max(1, depth)) {
    if (sink_) thread_ = std::thread([this] { Loop(); });
  }
  ~SinkPipeline() { Abort(); }

  // Drops queued batches and stops the thread.
  void Abort() { (void)Close(/*abort=*/true); }

  // Queues a batch; false when the sink has failed (see status()).
  bool Push(int64_t first_row, LabelBatch batch) {
    if (!sink_) return true;
    MutexLock lock(&mu_);
    space_.wait(lock.native(), [&] {
      mu_.AssertHeld();
      return static_cast<int>(queue_.size()) < depth_ || !status_.ok();
    });
    if (!status_.ok()) return false;
    queue_.emplace_back(first_row, std::move(batch));
    ready_.notify_one();
    return true;
  }

  // Waits for the queue to drain (or drops it with abort) and stops the thread. Returns the
  // sink's status.
  Status Close(bool abort) {
    if (!sink_ || closed_) return status();
    {
      MutexLock lock(&mu_);
      closing_ = true;
      if (abort) {
        queue_.clear();
        aborted_ = true;
      }
      ready_.notify_all();
    }
    thread_.join();
    closed_ = true;
    return status();
  }

  Status status() {
    MutexLock lock(&mu_);
    return status_;
  }

 private:
  void Loop() {
    for (;;) {
      int64_t first_row = 0;
      LabelBatch batch;
      {
        MutexLock lock(&mu_);
        ready_.wait(lock.native(), [&] {
          mu_.AssertHeld();
          return !queue_.empty() || closing_;
        });
        if (queue_.empty() || aborted_ || !status_.ok()) return;
        first_row = queue_.front().first;
        batch = std::move(queue_.front().second);
        queue_.pop_front();
        space_.notify_one();
      }
      Status st = sink_(first_row, std::move(batch));
      if (!st.ok()) {
        MutexLock lock(&mu_);
        status_ = st;
        queue_.clear();
        space_.notify_all();
        return;
      }
    }
  }

  const LabelBatchSink& sink_;
  const int depth_;
  std::thread thread_;
  Mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<std::pair<int64_t, LabelBatch>> queue_ GUARDED_BY(mu_);  // (first row, batch)
  Status status_ GUARDED_BY(mu_);
  bool closing_ GUARDED_BY(mu_) = false;
  bool aborted_ GUARDED_BY(mu_) = false;
  bool closed_ = false;
};

// ValidateAssignParams with k (checks against k) or without (k null).
Status CheckAssignParams(const AssignParams& params, const int* known_k) {
  if (params.l < 1)
    return Status::InvalidArgument("l must be >= 1, got " + std::to_string(params.l));
  if (params.l > kMaxLabelsPerSample)
    return Status::InvalidArgument("l must be <= " + std::to_string(kMaxLabelsPerSample) +
                                   " (the label store's limit), got " + std::to_string(params.l));
  const int k = known_k ? *known_k : 0;
  if (known_k && params.l > k) {
    return Status::InvalidArgument(
        "l = " + std::to_string(params.l) +
        " is larger than the number of centroids k = " + std::to_string(k) + "; use l <= k");
  }
  if (params.search_effort < 0)
    return Status::InvalidArgument("search_effort must be >= 0 (0 = default)");
  if (params.method == SearchMethod::kHnsw && params.search_effort > 0 &&
      params.search_effort < params.l) {
    return Status::InvalidArgument("HNSW efSearch (search_effort) " +
                                   std::to_string(params.search_effort) +
                                   " must be at least l = " + std::to_string(params.l));
  }
  if (params.chunk_rows < 1) return Status::InvalidArgument("chunk_rows must be >= 1");
  MLCD_RETURN_IF_ERROR(CheckThreads(params.threads));
  if (params.recall_sample < 0) return Status::InvalidArgument("recall_sample must be >= 0");
  if (params.hnsw_m < 2 || params.hnsw_ef_construction < 1)
    return Status::InvalidArgument("bad HNSW build parameters");
  if (params.ivf_nlist < 0 || (known_k && params.ivf_nlist > k))
    return Status::InvalidArgument("ivf_nlist must be in [0, k] (0 = about sqrt(k))");
  return Status::Ok();
}

}  // namespace

Status ValidateAssignParams(const AssignParams& params, int k) {
  return CheckAssignParams(params, &k);
}

Status ValidateAssignParams(const AssignParams& params) {
  return CheckAssignParams(params, nullptr);
}

CentroidIndex::~CentroidIndex() = default;

StatusOr<std::unique_ptr<CentroidIndex>> CentroidIndex::Build(const std::vector<float>& centroids,
                                                              int k, int d,
                                                              const AssignParams& params) {
  MLCD_RETURN_IF_ERROR(ValidateAssignParams(params, k));
  if (static_cast<int64_t>(centroids.size()) != static_cast<int64_t>(k) * d)
    return Status::InvalidArgument("centroid matrix holds " + std::to_string(centroids.size()) +
                                   " values, not k x d");
  std::unique_ptr<CentroidIndex> index(new CentroidIndex());
  index->method_ = params.method;
  index->k_ = k;
  index->d_ = d;
  try {
    index->exact_ = std::make_unique<faiss::IndexFlatIP>(d);
    index->exact_->add(k, centroids.data());
    if (params.method == SearchMethod::kHnsw) {
      auto hnsw =
          std::make_unique<faiss::IndexHNSWFlat>(d, params.hnsw_m, faiss::METRIC_INNER_PRODUCT);
      hnsw->hnsw.efConstruction = params.hnsw_ef_construction;
      hnsw->add(k, centroids.data());
      hnsw->hnsw.efSearch =
          params.search_effort > 0 ? params.search_effort : std::max(64, 4 * params.l);
      index->approx_ = std::move(hnsw);
    } else if (params.method == SearchMethod::kIvf) {
      int nlist = params.ivf_nlist > 0 ? params.ivf_nlist : DefaultNlist(k);
      index->ivf_quantizer_ = std::make_unique<faiss::IndexFlatIP>(d);
      auto ivf = std::make_unique<faiss::IndexIVFFlat>(index->ivf_quantizer_.get(), d, nlist,
                                                       faiss::METRIC_INNER_PRODUCT);
      ivf->cp.spherical = true;
      ivf->cp.min_points_per_centroid = 1;
      ivf->train(k, centroids.data());
      ivf->add(k, centroids.data());
      int nprobe = params.search_effort > 0 ? params.search_effort : std::max(4, nlist / 8);
      ivf->nprobe = static_cast<size_t>(std::min(nprobe, nlist));
      index->approx_ = std::move(ivf);
    }
  } catch (const faiss::FaissException& e) {
    return Status::Internal(std::string("building the centroid index failed: ") + e.what());
  }
  return index;
}

void CentroidIndex::SearchExact(int64_t n, const float* x, int l, float* scores,
                                int32_t* labels) const {
  std::vector<faiss::Index::idx_t> ids(static_cast<size_t>(n) * l);
  exact_->search(n, x, l, scores, ids.data());
  for (size_t i = 0; i < ids.size(); ++i) labels[i] = static_cast<int32_t>(ids[i]);
}

int64_t CentroidIndex::Search(int64_t n, const float* x, int l, float* scores,
                              int32_t* labels) const {
  if (!approx_) {
    SearchExact(n, x, l, scores, labels);
    return 0;
  }
  std::vector<faiss::Index::idx_t> ids(static_cast<size_t>(n) * l);
  approx_->search(n, x, l, scores, ids.data());
  // Rows the approximate index could not fill (too few candidates) are searched exactly.
  std::vector<int64_t> incomplete;
  for (int64_t i = 0; i < n; ++i) {
    bool full = true;
    for (int j = 0; j < l; ++j) full &= ids[i * l + j] >= 0;
    if (!full) incomplete.push_back(i);
  }
  for (size_t i = 0; i < ids.size(); ++i) labels[i] = static_cast<int32_t>(ids[i]);
  if (!incomplete.empty()) {
    std::vector<float> rows(incomplete.size() * d_), s(incomplete.size() * l);
    std::vector<int32_t> lab(incomplete.size() * l);
    for (size_t r = 0; r < incomplete.size(); ++r)
      std::copy(x + incomplete[r] * d_, x + (incomplete[r] + 1) * d_, rows.data() + r * d_);
    SearchExact(static_cast<int64_t>(incomplete.size()), rows.data(), l, s.data(), lab.data());
    for (size_t r = 0; r < incomplete.size(); ++r) {
      std::copy(s.data() + r * l, s.data() + (r + 1) * l, scores + incomplete[r] * l);
      std::copy(lab.data() + r * l, lab.data() + (r + 1) * l, labels + incomplete[r] * l);
    }
  }
  return static_cast<int64_t>(incomplete.size());
}

double MeasureRecall(const CentroidIndex& index, int64_t n, const float* rows, int l) {
  if (n <= 0) return 1.0;
  std::vector<float> s1(static_cast<size_t>(n) * l), s2(static_cast<size_t>(n) * l);
  std::vector<int32_t> approx(static_cast<size_t>(n) * l), exact(static_cast<size_t>(n) * l);
  index.Search(n, rows, l, s1.data(), approx.data());
  index.SearchExact(n, rows, l, s2.data(), exact.data());
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* a = approx.data() + i * l;
    const int32_t* e = exact.data() + i * l;
    for (int j = 0; j < l; ++j) hits += std::find(e, e + l, a[j]) != e + l;
  }
  return static_cast<double>(hits) / (static_cast<double>(n) * l);
}

StatusOr<AssignStats> AssignTopL(const FeatureShards& shards, const std::vector<float>& centroids,
                                 int k, const AssignParams& params,
                                 const AssignCallbacks& callbacks, const LabelBatchSink& sink) {
  MLCD_RETURN_IF_ERROR(ValidateAssignParams(params, k));
  const int d = shards.d();
  if (static_cast<int64_t>(centroids.size()) != static_cast<int64_t>(k) * d) {
    return Status::InvalidArgument(
        "centroids have d = " + std::to_string(centroids.size() / std::max(k, 1)) +
        " but the features have d = " + std::to_string(d));
  }
  auto note = [&](const std::string& text) {
    if (callbacks.on_note) callbacks.on_note(text);
  };
  auto t0 = std::chrono::steady_clock::now();
  ComputeScope scope(params.threads, callbacks.should_stop);
  const int64_t n = shards.rows();
  const int l = params.l;
  AssignStats stats;
  stats.rows = n;
  stats.k = k;
  stats.l = l;
  stats.top1_sizes.assign(static_cast<size_t>(k), 0);

  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<CentroidIndex> index,
                        CentroidIndex::Build(centroids, k, d, params));
  if (params.method != SearchMethod::kExact && params.recall_sample > 0) {
    std::vector<int64_t> sample = SampleRows(n, params.recall_sample, params.seed);
    std::vector<float> rows(sample.size() * d);
    shards.GatherRows(sample, rows.data());
    try {
      stats.approx_recall =
          MeasureRecall(*index, static_cast<int64_t>(sample.size()), rows.data(), l);
    } catch (const faiss::FaissException& e) {
      if (scope.stopped()) return Status::Cancelled("assignment cancelled while measuring recall");
      return Status::Internal(std::string("FAISS search failed: ") + e.what());
    }
    stats.recall_rows = static_cast<int64_t>(sample.size());
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s recall@%d against exact search: %.4f on %lld sampled rows",
                  SearchMethodName(params.method), l, stats.approx_recall,
                  static_cast<long long>(sample.size()));
    note(buf);
  }

  SinkPipeline pipeline(sink, params.sink_queue_depth);
  const int64_t chunk = params.chunk_rows;
  std::vector<float> x(static_cast<size_t>(std::min(chunk, n)) * d);
  double search_seconds = 0;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    if (scope.ShouldStop()) {
      pipeline.Abort();
      return Status::Cancelled("assignment cancelled after " + std::to_string(begin) + " of " +
                               std::to_string(n) + " rows");
    }
    const int64_t end = std::min(n, begin + chunk);
    const int64_t rows = end - begin;
    shards.ReadRows(begin, end, x.data());
    LabelBatch batch;
    batch.labels_per_sample = l;
    batch.labels.resize(static_cast<size_t>(rows) * l);
    batch.scores.resize(static_cast<size_t>(rows) * l);
    auto ts = std::chrono::steady_clock::now();
    try {
      stats.exact_fallback_rows +=
          index->Search(rows, x.data(), l, batch.scores.data(), batch.labels.data());
    } catch (const faiss::FaissException& e) {
      pipeline.Abort();
      if (scope.stopped()) {
        return Status::Cancelled("assignment cancelled after " + std::to_string(begin) + " of " +
                                 std::to_string(n) + " rows");
      }
      return Status::Internal(std::string("FAISS search failed: ") + e.what());
    }
    search_seconds += SecondsSince(ts);
    for (int64_t i = 0; i < rows; ++i) ++stats.top1_sizes[batch.labels[i * l]];
    shards.DropRows(begin, end);
    if (sink) {
      batch.sample_ids.resize(static_cast<size_t>(rows));
      shards.SampleIds(begin, end, batch.sample_ids.data());
      if (!pipeline.Push(begin, std::move(batch))) break;
    }
    if (callbacks.on_progress) callbacks.on_progress(end, n);
  }
  MLCD_RETURN_IF_ERROR(pipeline.Close(/*abort=*/false));
  if (stats.exact_fallback_rows > 0) {
    note(std::to_string(stats.exact_fallback_rows) +
         " rows got fewer than l approximate results and were searched "
         "exactly");
  }
  stats.search_seconds = search_seconds;
  stats.seconds = SecondsSince(t0);
  return stats;
}

StatusOr<std::vector<float>> LoadCentroids(const std::string& path, int expected_d, int* k,
                                           int* d) {
  std::vector<int64_t> shape;
  MLCD_ASSIGN_OR_RETURN(std::vector<float> c, ReadNpyAsFloat32(path, &shape));
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1) {
    return Status::InvalidArgument(path + ": centroids must be a non-empty 2-d array (k x d)");
  }
  if (shape[0] > INT32_MAX) return Status::InvalidArgument(path + ": more than 2^31-1 centroids");
  if (expected_d > 0 && shape[1] != expected_d) {
    return Status::InvalidArgument(path + ": centroids have d = " + std::to_string(shape[1]) +
                                   " but the features have d = " + std::to_string(expected_d));
  }
  *k = static_cast<int>(shape[0]);
  *d = static_cast<int>(shape[1]);
  for (int64_t r = 0; r < shape[0]; ++r) {
    double s = 0;
    for (int64_t j = 0; j < shape[1]; ++j) {
      float v = c[r * shape[1] + j];
      if (!std::isfinite(v))
        return Status::InvalidArgument(path + ": centroid row " + std::to_string(r) +
                                       " holds NaN or Inf");
      s += static_cast<double>(v) * v;
    }
    if (s == 0)
      return Status::InvalidArgument(path + ": centroid row " + std::to_string(r) +
                                     " is all zeros");
  }
  NormalizeRows(c.data(), shape[0], *d);
  return c;
}

ClusterSizeSummary SummarizeClusterSizes(const std::vector<int64_t>& sizes) {
  ClusterSizeSummary s;
  if (sizes.empty()) return s;
  s.min = *std::min_element(sizes.begin(), sizes.end());
  s.max = *std::max_element(sizes.begin(), sizes.end());
  double total = 0, sq = 0;
  for (int64_t v : sizes) {
    total += static_cast<double>(v);
    sq += static_cast<double>(v) * static_cast<double>(v);
    s.empty_clusters += v == 0;
  }
  const double k = static_cast<double>(sizes.size());
  s.mean = total / k;
  s.stddev = std::sqrt(std::max(0.0, sq / k - s.mean * s.mean));
  s.imbalance_factor = total > 0 ? sq * k / (total * total) : 0;
  return s;
}

}  // namespace mlcd::clusterd
