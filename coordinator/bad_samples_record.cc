#include "coordinator/bad_samples_record.h"

#include <algorithm>

#include "common/limits.h"

namespace mlcd::coordinator {

void RecordBadSamples(JobEntry* job, const std::string& assignment_id,
                      const v1::WorkerProgress& progress) {
  if (progress.bad_samples() <= 0 || !job->rec.has_attempt()) return;
  v1::GangAttempt* attempt = job->rec.mutable_attempt();
  if (attempt->kind() != v1::ASSIGNMENT_KIND_TRAIN || attempt->round() < 0 ||
      attempt->round() >= job->job().rounds_size())
    return;
  int64_t sum = 0;
  for (auto& m : *attempt->mutable_members()) {
    if (m.assignment_id() == assignment_id) {
      m.set_bad_samples(std::max(m.bad_samples(), progress.bad_samples()));
      m.clear_bad_sample_keys();
      for (int i = 0; i < progress.bad_sample_keys_size() && i < kMaxBadSampleKeys; ++i)
        m.add_bad_sample_keys(progress.bad_sample_keys(i).substr(0, kMaxBadSampleKeyBytes));
    }
    sum += m.bad_samples();
  }
  v1::BadSamples* bad = job->job().mutable_rounds(attempt->round())->mutable_bad_samples();
  bad->set_count(std::max(bad->count(), sum));
  for (const auto& m : attempt->members()) {
    for (const auto& key : m.bad_sample_keys()) {
      if (bad->first_keys_size() >= kMaxBadSampleKeys) return;
      const auto& have = bad->first_keys();
      if (std::find(have.begin(), have.end(), key) == have.end()) bad->add_first_keys(key);
    }
  }
}

}  // namespace mlcd::coordinator
