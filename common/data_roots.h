// Confined paths: the directories a service may read and write for its callers.
//
// Every path a request or job spec names (features, centroids, checkpoints, datasets) must
// resolve, after symlinks, under one of the service's data roots (`--data-root DIR`,
// repeatable). Resolution takes the realpath of the longest prefix that exists and appends
// the rest, which may not hold "..". A path outside every root is refused with one message
// whether or not it exists, so errors never tell a caller what lies outside the roots.
//
//   MLCD_ASSIGN_OR_RETURN(DataRoots roots, DataRoots::Make(flags.data_roots));
//   MLCD_ASSIGN_OR_RETURN(std::string out, roots.Confine(request.centroids_out(), "centroids_out"));
//
// Private folders (`--private-dir DIR`, repeatable, and each service's own state under its
// --data-dir) are never read or written for a caller even when they lie under a root: the
// services' databases, TLS material and tokens. The most specific folder decides: a path
// under a private folder is refused unless a root lies deeper inside that private folder and
// holds the path (local up's output folders inside its state folder; docs/hardening.md).
//
// What Confine checks is the path at the time of the call: a directory swapped for a symlink
// afterwards (by someone who can write inside a root) is caught only where the file is
// opened through common/confined_file.h, which verifies the opened descriptor itself.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mlcd {

// Where Debian's dataset packages (dataset-fashion-mnist) install: a default root.
inline constexpr const char* kSharedDatasetsDir = "/usr/share/datasets";

class DataRoots {
 public:
  DataRoots() = default;
  // Each root made absolute and resolved (it must exist and be a directory): INVALID_ARGUMENT
  // naming the first that is not. Duplicates are dropped. Each private folder is made
  // absolute (from the working directory) and resolved as far as it exists; it need not exist
  // yet (a database made later).
  static StatusOr<DataRoots> Make(const std::vector<std::string>& roots,
                                  const std::vector<std::string>& private_dirs = {});
  // A service's roots from its flags: `given` (--data-root) when any, else the default: its
  // --data-dir (the working directory when empty) and kSharedDatasetsDir when it exists;
  // `private_dirs` as in Make.
  static StatusOr<DataRoots> FromFlags(const std::vector<std::string>& given,
                                       const std::string& data_dir,
                                       const std::vector<std::string>& private_dirs = {});

  const std::vector<std::string>& roots() const { return roots_; }
  const std::vector<std::string>& private_dirs() const { return private_; }
  // "/a, /b" (or "none"), then "; private: /x" when there are private folders.
  std::string Describe() const;

  // The resolved form of `path` when it lies under a root. `path` must be absolute, at most
  // kMaxPathLength bytes and hold no NUL (INVALID_ARGUMENT). A dangling symbolic link met on
  // the way counts as outside (its target is unknown). Outside every root:
  // PERMISSION_DENIED "<field>: '<path>' is not under a data root of this service (...)", the
  // same for existing and missing paths.
  StatusOr<std::string> Confine(const std::string& path, const std::string& field) const;

  // For an entry met while listing a confined directory (a folder of feature shards, an
  // image folder, a directory of tar shards): a symbolic link must resolve (realpath, so its
  // target exists) under a root, else the same PERMISSION_DENIED as Confine; a dangling link
  // and one leading outside are refused alike, so a listing tells nothing of what lies
  // outside. Anything that is not a link passes (it lies in the directory listed). Call it
  // before anything follows the entry (stat, is_directory, open).
  Status CheckListedEntry(const std::string& path, const std::string& field) const;

  // True when `resolved` (an absolute path with no links, "." or "..") is a root or lies under
  // one, and no private folder at least as deep as that root holds it.
  bool Holds(const std::string& resolved) const;

  // The PERMISSION_DENIED every refusal of a path outside the roots returns: "<field>:
  // '<path>' is not under a data root of this service (--data-root: ...); paths are refused
  // there whether or not they exist".
  Status Refusal(const std::string& path, const std::string& field) const;

 private:
  std::vector<std::string> roots_;    // resolved, no trailing '/' (except "/")
  std::vector<std::string> private_;  // the same
};

// The folders under a service's --data-dir that hold its own state and are private whatever
// the roots say: the TLS key copies (tls-private, common/tls_config.h) and `state_subdirs`
// (the coordinator's db/ and backups/). Empty when `data_dir` is empty.
std::vector<std::string> OwnStateDirs(const std::string& data_dir,
                                      const std::vector<std::string>& state_subdirs = {});

// True when `resolved` (absolute, no links, "." or "..") is `dir` or lies under it; "/" holds
// everything.
bool PathIsUnder(const std::string& resolved, const std::string& dir);

// Adds the repeatable `--data-root DIR` flag to `app`, filling `roots`; `default_text` says
// in --help what applies when none is given.
void AddDataRootFlag(CLI::App& app, std::vector<std::string>* roots,
                     const std::string& default_text);
// Adds the repeatable `--private-dir DIR` flag to `app`, filling `dirs`.
void AddPrivateDirFlag(CLI::App& app, std::vector<std::string>* dirs);

}  // namespace mlcd
