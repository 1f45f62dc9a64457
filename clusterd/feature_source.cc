#include "clusterd/feature_source.h"

#include <dirent.h>
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/file_util.h"

namespace mlcd::clusterd {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

StatusOr<std::vector<std::string>> ListShardDir(const std::string& dir, const DataRoots* roots) {
  DIR* d = opendir(dir.c_str());
  if (!d) return Status::InvalidArgument(dir + ": cannot list directory: " + std::strerror(errno));
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    if (!EndsWith(name, ".npy") || EndsWith(name, ".ids.npy") || EndsWith(name, ".labels.npy"))
      continue;
    names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  std::string prefix = EndsWith(dir, "/") ? dir : dir + "/";
  for (const auto& n : names) {
    if (roots) MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(prefix + n, "features.paths"));
    if (!IsDirectory(prefix + n)) out.push_back(prefix + n);
  }
  return out;
}

// Rows of a 2-d array are float32 or float16 values; a value is non-finite when its exponent
// bits are all ones.
inline bool RowFinite(const void* row, int d, NpyDtype dtype) {
  if (dtype == NpyDtype::kFloat32) {
    const auto* p = static_cast<const uint32_t*>(row);
    uint32_t bad = 0;
    for (int j = 0; j < d; ++j) bad |= static_cast<uint32_t>((p[j] & 0x7f800000u) == 0x7f800000u);
    return bad == 0;
  }
  const auto* p = static_cast<const uint16_t*>(row);
  uint32_t bad = 0;
  for (int j = 0; j < d; ++j) bad |= static_cast<uint32_t>((p[j] & 0x7c00u) == 0x7c00u);
  return bad == 0;
}

void ConvertRow(const MappedNpy& shard, int64_t local, int d, float* out) {
  if (shard.dtype() == NpyDtype::kFloat32) {
    std::memcpy(out, shard.data_as<float>() + local * d, sizeof(float) * d);
  } else {
    HalfToFloatN(shard.data_as<uint16_t>() + local * d, out, static_cast<size_t>(d));
  }
}

void NormalizeRow(float* x, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += static_cast<double>(x[j]) * x[j];
  if (s <= 0) return;
  float inv = static_cast<float>(1.0 / std::sqrt(s));
  for (int j = 0; j < d; ++j) x[j] *= inv;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& paths,
                                                    const DataRoots* roots) {
  if (paths.empty())
    return Status::InvalidArgument(
        "no feature paths given: pass .npy files or directories of them");
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (p.empty()) return Status::InvalidArgument("empty feature path");
    if (!PathExists(p)) return Status::NotFound(p + ": no such file or directory");
    if (IsDirectory(p)) {
      MLCD_ASSIGN_OR_RETURN(std::vector<std::string> files, ListShardDir(p, roots));
      if (files.empty()) {
        return Status::InvalidArgument(
            p +
            ": directory holds no .npy feature shards (files named *.npy, "
            "other than *.ids.npy and *.labels.npy)");
      }
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

StatusOr<FeatureShards> FeatureShards::Open(const std::vector<std::string>& paths,
                                            const std::vector<std::string>& ids_paths,
                                            const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandShardPaths(paths, roots));
  FeatureShards fs;
  fs.starts_.push_back(0);
  for (const auto& file : files) {
    MLCD_ASSIGN_OR_RETURN(MappedNpy m, MappedNpy::Open(file, roots));
    Status st = m.Expect2d({NpyDtype::kFloat32, NpyDtype::kFloat16});
    if (!st.ok()) {
      return Status::InvalidArgument(
          st.message() +
          " (feature shards must be 2-d n x d float32 or float16; convert with "
          "arr.astype(numpy.float32))");
    }
    if (m.cols() <= 0) return Status::InvalidArgument(file + ": feature dimension d is 0");
    if (m.cols() > kMaxFeatureDim) {
      return Status::InvalidArgument(file + ": feature dimension d = " + std::to_string(m.cols()) +
                                     " is larger than the supported " +
                                     std::to_string(kMaxFeatureDim));
    }
    if (fs.d_ == 0) {
      fs.d_ = static_cast<int>(m.cols());
    } else if (m.cols() != fs.d_) {
      return Status::InvalidArgument(
          file + ": has d = " + std::to_string(m.cols()) + " but " + fs.shards_.front().path() +
          " has d = " + std::to_string(fs.d_) + "; all shards must have the same dimension");
    }
    fs.total_rows_ += m.rows();
    fs.starts_.push_back(fs.total_rows_);
    fs.shards_.push_back(std::move(m));
  }
  if (fs.total_rows_ == 0) {
    return Status::InvalidArgument(
        "empty input: " + std::to_string(files.size()) +
        " feature shard(s) hold 0 rows in total (first: " + files.front() + ")");
  }
  if (!ids_paths.empty()) {
    if (ids_paths.size() != fs.shards_.size()) {
      return Status::InvalidArgument(
          "got " + std::to_string(ids_paths.size()) + " ids files for " +
          std::to_string(fs.shards_.size()) +
          " feature shards; give exactly one ids file per shard, in shard order");
    }
    std::vector<uint64_t> all;
    all.reserve(static_cast<size_t>(fs.total_rows_));
    for (size_t i = 0; i < ids_paths.size(); ++i) {
      MLCD_ASSIGN_OR_RETURN(MappedNpy ids, MappedNpy::Open(ids_paths[i], roots));
      Status st = ids.Expect2d({NpyDtype::kInt64, NpyDtype::kUint64}, /*allow_1d=*/true);
      if (!st.ok())
        return Status::InvalidArgument(st.message() +
                                       " (sample ids must be a 1-d int64/uint64 array)");
      if (ids.header().num_elements() != fs.shards_[i].rows() ||
          (ids.header().shape.size() == 2 && ids.cols() != 1)) {
        return Status::InvalidArgument(ids_paths[i] + ": holds " +
                                       std::to_string(ids.header().num_elements()) +
                                       " ids but its shard " + fs.shards_[i].path() + " has " +
                                       std::to_string(fs.shards_[i].rows()) + " rows");
      }
      const auto* p = ids.data_as<uint64_t>();
      for (int64_t r = 0; r < ids.header().num_elements(); ++r) {
        if (ids.dtype() == NpyDtype::kInt64 && static_cast<int64_t>(p[r]) < 0) {
          return Status::InvalidArgument(ids_paths[i] + ": negative sample id " +
                                         std::to_string(static_cast<int64_t>(p[r])) + " at index " +
                                         std::to_string(r));
        }
        all.push_back(p[r]);
      }
      fs.ids_.push_back(std::move(ids));
    }
    std::sort(all.begin(), all.end());
    auto dup = std::adjacent_find(all.begin(), all.end());
    if (dup != all.end()) {
      return Status::InvalidArgument(
          "sample id " + std::to_string(*dup) +
          " appears more than once across the ids files; sample ids must be unique");
    }
  }
  return fs;
}

std::string FeatureShards::Describe() const {
  bool mixed = false;
  for (const auto& s : shards_) mixed |= s.dtype() != shards_.front().dtype();
  std::ostringstream os;
  os << shards_.size() << (shards_.size() == 1 ? " shard, " : " shards, ") << total_rows_ << " x "
     << d_ << " " << (mixed ? "float16/float32" : NpyDtypeName(shards_.front().dtype()));
  return os.str();
}

Status FeatureShards::CheckFinite(const std::function<bool()>& should_stop) const {
  constexpr int64_t kBlock = 16384;
  constexpr int kShow = 5;
  std::string errors;
  int bad_files = 0;
  for (const auto& shard : shards_) {
    int64_t n = shard.rows();
    size_t row_bytes = static_cast<size_t>(d_) * NpyDtypeSize(shard.dtype());
    const char* base = static_cast<const char*>(shard.data());
    int64_t num_blocks = (n + kBlock - 1) / kBlock;
    // Allocated up front: nothing inside the parallel region may throw (an exception leaving
    // an OpenMP region terminates the process).
    std::vector<int64_t> block_bad(static_cast<size_t>(num_blocks), 0);
    std::vector<int64_t> block_first(static_cast<size_t>(num_blocks) * kShow, -1);
    constexpr int64_t kGroup = 64;  // blocks between cancellation checks
    for (int64_t g0 = 0; g0 < num_blocks; g0 += kGroup) {
      if (should_stop && should_stop())
        return Status::Cancelled("cancelled while scanning features");
      int64_t g1 = std::min(num_blocks, g0 + kGroup);
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t b = g0; b < g1; ++b) {
        int64_t r1 = std::min(n, (b + 1) * kBlock);
        for (int64_t r = b * kBlock; r < r1; ++r) {
          if (!RowFinite(base + r * row_bytes, d_, shard.dtype())) {
            if (block_bad[b] < kShow) block_first[b * kShow + block_bad[b]] = r;
            ++block_bad[b];
          }
        }
      }
    }
    int64_t bad = 0;
    std::vector<int64_t> first;
    for (int64_t b = 0; b < num_blocks; ++b) {
      bad += block_bad[b];
      for (int64_t i = 0; i < std::min<int64_t>(block_bad[b], kShow); ++i)
        if (first.size() < kShow) first.push_back(block_first[b * kShow + i]);
    }
    if (bad > 0) {
      ++bad_files;
      std::ostringstream os;
      os << shard.path() << ": " << bad << " of " << n << " rows contain NaN or Inf values (row";
      os << (first.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < first.size(); ++i) os << (i ? ", " : "") << first[i];
      if (bad > static_cast<int64_t>(first.size())) os << ", ...";
      os << ")";
      if (!errors.empty()) errors += "; ";
      errors += os.str();
    }
  }
  if (bad_files > 0) {
    return Status::InvalidArgument(
        errors + "; remove or repair those rows (every feature value must be finite)");
  }
  return Status::Ok();
}

size_t FeatureShards::ShardOf(int64_t row, int64_t* local) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), row);
  size_t s = static_cast<size_t>(it - starts_.begin()) - 1;
  // Skip empty shards (several equal starts).
  while (s + 1 < shards_.size() && starts_[s + 1] <= row) ++s;
  *local = row - starts_[s];
  return s;
}

void FeatureShards::ReadRows(int64_t begin, int64_t end, float* out, bool normalize) const {
  int64_t n = end - begin;
  if (n <= 0) return;
#pragma omp parallel for schedule(static) if (n >= 4096)
  for (int64_t i = 0; i < n; ++i) {
    int64_t local;
    size_t s = ShardOf(begin + i, &local);
    float* row = out + i * d_;
    ConvertRow(shards_[s], local, d_, row);
    if (normalize) NormalizeRow(row, d_);
  }
}

void FeatureShards::GatherRows(const std::vector<int64_t>& rows, float* out, bool normalize) const {
  int64_t n = static_cast<int64_t>(rows.size());
#pragma omp parallel for schedule(static) if (n >= 4096)
  for (int64_t i = 0; i < n; ++i) {
    int64_t local;
    size_t s = ShardOf(rows[i], &local);
    float* row = out + i * d_;
    ConvertRow(shards_[s], local, d_, row);
    if (normalize) NormalizeRow(row, d_);
  }
}

uint64_t FeatureShards::sample_id(int64_t row) const {
  if (ids_.empty()) return static_cast<uint64_t>(row);
  int64_t local;
  size_t s = ShardOf(row, &local);
  return ids_[s].data_as<uint64_t>()[local];
}

void FeatureShards::SampleIds(int64_t begin, int64_t end, uint64_t* out) const {
  if (ids_.empty()) {
    for (int64_t r = begin; r < end; ++r) out[r - begin] = static_cast<uint64_t>(r);
    return;
  }
  for (int64_t r = begin; r < end; ++r) out[r - begin] = sample_id(r);
}

void FeatureShards::DropRows(int64_t begin, int64_t end) const {
  for (size_t s = 0; s < shards_.size(); ++s) {
    int64_t b = std::max(begin, starts_[s]);
    int64_t e = std::min(end, starts_[s + 1]);
    if (e > b) shards_[s].DropRows(b - starts_[s], e - starts_[s]);
  }
}

void NormalizeRows(float* x, int64_t n, int d) {
#pragma omp parallel for schedule(static) if (n >= 4096)
  for (int64_t i = 0; i < n; ++i) NormalizeRow(x + i * d, d);
}

StatusOr<std::vector<int64_t>> ReadClassLabels(const std::string& path, int64_t expected_rows) {
  std::vector<int64_t> shape;
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> labels, ReadNpyAsInt64(path, &shape));
  if (shape.size() == 2 && shape[1] != 1) {
    return Status::InvalidArgument(path +
                                   ": class labels must be 1-d (one integer per row), got shape " +
                                   std::to_string(shape[0]) + " x " + std::to_string(shape[1]));
  }
  if (static_cast<int64_t>(labels.size()) != expected_rows) {
    return Status::InvalidArgument(path + ": holds " + std::to_string(labels.size()) +
                                   " class labels but the features have " +
                                   std::to_string(expected_rows) + " rows");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) {
      return Status::InvalidArgument(path + ": negative class label " + std::to_string(labels[i]) +
                                     " at row " + std::to_string(i));
    }
    // The quality report keeps counters per class id, so an id like 1e12 would be an
    // allocation of terabytes rather than a report.
    if (labels[i] >= kMaxClassId) {
      return Status::InvalidArgument(
          path + ": class label " + std::to_string(labels[i]) + " at row " + std::to_string(i) +
          " is too large; class ids must be in [0, " + std::to_string(kMaxClassId) +
          ") (number the classes densely from 0)");
    }
  }
  return labels;
}

}  // namespace mlcd::clusterd
