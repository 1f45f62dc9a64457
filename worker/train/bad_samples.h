// Accounting of bad samples (docs/data.md, "Bad images"): images that cannot be decoded
// (corrupt, truncated, zero-byte, unsupported) are skipped by the loader, logged with their
// key and counted; once the distinct bad samples exceed dataset.max_bad_fraction of the
// dataset the job fails with a message naming the first bad keys. No torch.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace mlcd::worker {

// How many bad samples the failure message names.
constexpr size_t kBadSamplesNamed = 5;

struct BadSample {
  int64_t id = 0;
  std::string key;  // the dataset's key, or the id as text
  Status status;    // why it was bad
};

// A rank's bad samples so far: the distinct ones and the keys of the first kBadSamplesNamed.
struct BadSamplesSoFar {
  int64_t distinct = 0;
  std::vector<std::string> first_keys;
};

class BadSampleTracker {
 public:
  // `dataset_size` samples, of which floor(max_fraction * dataset_size) distinct ones may be
  // bad; `what` names the dataset in messages.
  BadSampleTracker(double max_fraction, int64_t dataset_size, std::string what);

  // Logs the sample and counts it (a sample met again, e.g. in a later epoch, is logged at
  // most once and counted once toward the limit). FAILED_PRECONDITION, naming the first bad
  // keys and the limit, once the distinct bad samples exceed it.
  Status Record(const BadSample& sample);

  int64_t distinct() const;
  // distinct() and the keys of the first kBadSamplesNamed distinct bad samples, in the order
  // met.
  BadSamplesSoFar so_far() const;
  int64_t allowed() const { return allowed_; }

 private:
  double max_fraction_;
  int64_t dataset_size_;
  int64_t allowed_;
  std::string what_;
  mutable Mutex mu_;
  std::set<int64_t> seen_ GUARDED_BY(mu_);
  std::vector<BadSample> first_ GUARDED_BY(mu_);
};

}  // namespace mlcd::worker
