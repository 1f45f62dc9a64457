// Where mlcd-clusterd writes what a caller names (docs/security.md,
// "Outputs"): with `--output-root DIR`, reads and writes are separate. The data roots are
// read (features, centroids, class labels); every output a request names (centroids_out,
// features.generate.features_out / labels_out) must lie in the caller's own area of DIR
// (common/output_area_names.h names them; the coordinator checks checkpoint_dir by the same):
//   DIR/users/<kind>/<name>/   a caller acting as "<kind>:<name>" (token:alice ->
//                              users/token/alice), escaped so that every identity has its own
//                              folder and no name can climb out of it
//   DIR/jobs/<id>/             the coordinator's phases acting for job:<id>
//   DIR/features/              the round-0 feature cache the jobs share (jobs only)
// So a caller only ever replaces files it created itself (its area is its own: structural),
// never another user's, a job's, or the services' state (which is never under DIR).
// The rest of DIR is private (common/data_roots.h): with DIR the coordinator's --data-dir,
// its database and backups beside jobs/ are never read or written for a caller, whatever
// the data roots hold. The three area folders are read roots of clusterd as well (Assign reads the centroids a
// Cluster call wrote). Without --output-root, outputs go wherever the data roots allow (and
// clusterd logs a warning at start): reads and writes are then not separated.
#pragma once

#include <string>
#include <vector>

#include "clusterd/feature_request.h"
#include "common/acting_for.h"
#include "common/status.h"

namespace mlcd::clusterd {

class OutputAreas {
 public:
  OutputAreas() = default;
  // `root` made absolute and resolved (created when missing); "" = no output root.
  static StatusOr<OutputAreas> Make(const std::string& root);

  bool enabled() const { return !root_.empty(); }
  const std::string& root() const { return root_; }

  // The folder `acting` writes under (absolute; OutputAreaOf of the root).
  std::string AreaOf(const ActingFor& acting) const;
  // DIR/jobs, DIR/features and DIR/users, made when missing (empty when off): clusterd adds
  // them to its read roots.
  StatusOr<std::vector<std::string>> MakeAreaFolders() const;

  // OK when the output root is off, or `resolved` (a path confined to the roots, e.g. from
  // DataRoots::Confine) lies in the area of `acting`. PERMISSION_DENIED naming the field, the
  // path and the area to write under otherwise.
  Status CheckWrite(const std::string& resolved, const std::string& field,
                    const ActingFor& acting) const;

 private:
  std::string root_;  // resolved, no trailing '/'
};

// The outputs `source` names (generated features and their labels), resolved with `resolve`
// and checked against the output area of `acting`: PERMISSION_DENIED naming the field when
// one lies outside it. OK for a source that writes nothing.
Status CheckFeatureOutputs(const v1::FeatureSource& source, const PathResolver& resolve,
                           const OutputAreas& areas, const ActingFor& acting);

}  // namespace mlcd::clusterd
