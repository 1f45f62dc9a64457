#include "worker/train/bad_samples.h"

#include <cmath>
#include <sstream>

#include "common/log.h"

namespace mlcd::worker {

BadSampleTracker::BadSampleTracker(double max_fraction, int64_t dataset_size, std::string what)
    : max_fraction_(max_fraction),
      dataset_size_(dataset_size),
      allowed_(static_cast<int64_t>(std::floor(max_fraction * static_cast<double>(dataset_size)))),
      what_(std::move(what)) {}

int64_t BadSampleTracker::distinct() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(seen_.size());
}

BadSamplesSoFar BadSampleTracker::so_far() const {
  MutexLock lock(&mu_);
  BadSamplesSoFar out;
  out.distinct = static_cast<int64_t>(seen_.size());
  for (const auto& b : first_) out.first_keys.push_back(b.key);
  return out;
}

Status BadSampleTracker::Record(const BadSample& sample) {
  MutexLock lock(&mu_);
  if (!seen_.insert(sample.id).second) return Status::Ok();
  MLCD_LOG(WARNING) << "bad sample " << sample.id << " ('" << sample.key
                    << "') skipped: " << sample.status.ToString();
  if (first_.size() < kBadSamplesNamed) first_.push_back(sample);
  const int64_t bad = static_cast<int64_t>(seen_.size());
  if (bad <= allowed_) return Status::Ok();
  std::ostringstream m;
  m << "too many bad images in " << what_ << ": " << bad << " distinct samples of " << dataset_size_
    << " could not be read or decoded, more than dataset.max_bad_fraction " << max_fraction_
    << " allows (" << allowed_ << "); first bad:";
  for (const auto& b : first_) m << " '" << b.key << "' (" << b.status.ToString() << ");";
  m << " fix or remove them and rebuild the dataset index, or raise dataset.max_bad_fraction";
  return Status::FailedPrecondition(m.str());
}

}  // namespace mlcd::worker
