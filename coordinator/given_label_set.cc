#include "coordinator/given_label_set.h"

#include "clients/labelstore_client.h"
#include "clients/labelstore_limits.h"
#include "common/dataset/dataset_index.h"
#include "common/enums.h"
#include "common/idx.h"
#include "common/job_spec.h"

namespace mlcd::coordinator {
namespace {

constexpr const char* kField = "spec.clustering.label_set";

std::string Quoted(const std::string& name) { return "'" + name + "'"; }

// "spec.clustering.k: 10, but label set 'x' has 16 classes; ..." for a spec value that is
// given (not 0) and differs from the set's.
Status CheckShape(const std::string& field, int32_t given, int32_t of_set, const std::string& set,
                  const std::string& what) {
  if (given == 0 || given == of_set) return Status::Ok();
  return Status::InvalidArgument(
      "spec.clustering." + field + ": " + std::to_string(given) + ", but label set " + Quoted(set) +
      " (spec.clustering.label_set) "
      "has " +
      std::to_string(of_set) + " " + what + "; set " + field + ": " + std::to_string(of_set) +
      " or leave it out (a given set brings its own)");
}

}  // namespace

StatusOr<uint64_t> TrainingSampleCount(const v1::JobSpec& spec) {
  const v1::DatasetSpec& d = spec.dataset();
  if (IsIndexedFormat(d.format())) {
    StatusOr<DatasetIndex> index = LoadDatasetIndex(d.index(), /*check_fingerprint=*/false);
    if (!index.ok()) return index.status().WithContext("spec.dataset.index");
    return static_cast<uint64_t>(index->size());
  }
  std::string images, labels;
  Status found = FindMnistSplit(d.path(), "train", &images, &labels);
  if (!found.ok()) return found.WithContext("spec.dataset.path");
  // The labels file holds one byte per image: the count without reading the pixels.
  StatusOr<std::vector<uint8_t>> classes = ReadIdxLabels(labels, d.limit());
  if (!classes.ok()) return classes.status().WithContext("spec.dataset.path");
  return static_cast<uint64_t>(classes->size());
}

StatusOr<v1::LabelSetInfo> DescribeGivenLabelSet(const std::string& labelstore_address,
                                                 const std::string& name) {
  Status valid = labelstore::ValidateLabelSetName(name);
  if (!valid.ok()) return Status::InvalidArgument(std::string(kField) + ": " + valid.message());
  labelstore::LabelStoreClient client(labelstore_address);
  StatusOr<v1::LabelSetInfo> info = client.Describe(name);
  if (info.ok()) return info;
  if (info.status().code() == StatusCode::kNotFound) {
    return Status::NotFound(std::string(kField) + ": label set " + Quoted(name) +
                            " does not exist in the label store at " + labelstore_address +
                            "; import one (`mlcdctl labels import --name " + name +
                            " --k K --npy labels.npy`) or name one of `mlcdctl labels list`");
  }
  return info.status().WithContext(std::string(kField) + ": describing label set " + Quoted(name));
}

Status ApplyGivenLabelSet(const v1::LabelSetInfo& info, uint64_t samples, v1::JobSpec* spec) {
  const std::string& name = info.name();
  if (info.state() != v1::LABEL_SET_STATE_SEALED) {
    return Status::FailedPrecondition(
        std::string(kField) + ": label set " + Quoted(name) +
        " is not sealed (it may still change while the job trains); seal it when its rows are "
        "written (`mlcdctl labels seal " +
        name + "`)");
  }
  v1::ClusteringSpec* cl = spec->mutable_clustering();
  MLCD_RETURN_IF_ERROR(CheckShape("k", cl->k(), info.num_classes(), name, "classes"));
  MLCD_RETURN_IF_ERROR(
      CheckShape("l", cl->l(), info.labels_per_sample(), name, "labels per sample"));
  if (info.num_samples() < samples) {
    return Status::FailedPrecondition(
        std::string(kField) + ": label set " + Quoted(name) + " holds labels for " +
        std::to_string(info.num_samples()) + " samples, but the training set has " +
        std::to_string(samples) + " (sample ids 0.." + std::to_string(samples - 1) +
        "); label every sample, or train on fewer (dataset.limit, or a smaller index)");
  }
  cl->set_k(info.num_classes());
  cl->set_l(info.labels_per_sample());
  // The relations that involve k and l (world_size <= k, ...) with the set's numbers.
  return SpecProblemsToStatus(JobSpecProblems(*spec));
}

}  // namespace mlcd::coordinator
