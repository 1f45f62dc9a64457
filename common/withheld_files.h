// Files a child process may not read, enforced by the kernel (Landlock, Linux 5.19+ for the
// ABI used here). A worker agent's children decode data they did not choose; they run as the
// agent's user, so without this an exploit in a decoder could open the agent's key and token
// files. A WithheldFiles ruleset lets a process read every file except the given ones:
//
//   auto withheld = WithheldFiles::Build({key_path, token_path, data_dir + "/tls-private"});
//   spawn.landlock_ruleset_fd = withheld->fd();   // the child restricts itself before exec
//
// Landlock only allows, it cannot deny one path, so the ruleset allows reading beneath every
// entry of every folder on the way from / to a withheld path, except that path (a withheld
// folder hides everything in it). What the ruleset does not name stays unreadable: an entry
// made later directly in one of those folders (a renewed key beside the old one: good; a
// file made in /tmp when a withheld file lives under /tmp: keep withheld files out of folders
// that children create files in). Only reading files is restricted; listing folders, writing,
// creating and executing are not. Renaming into another folder (Landlock's "refer" right,
// which every ruleset restricts) is allowed beneath the same entries.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

// The Landlock ABI version this kernel offers (0 = none: not built in, not enabled, or
// refused by a seccomp filter).
int LandlockAbi();
// The ABI WithheldFiles needs (2: renaming across folders can be allowed).
inline constexpr int kWithheldFilesMinLandlockAbi = 2;

class WithheldFiles {
 public:
  // UNAVAILABLE when the kernel's Landlock is older than kWithheldFilesMinLandlockAbi or
  // missing; INVALID_ARGUMENT for a relative path. Paths that do not exist are skipped (there
  // is nothing to read); the others are resolved (symbolic links followed) first.
  static StatusOr<WithheldFiles> Build(const std::vector<std::string>& paths);

  WithheldFiles(WithheldFiles&& other) noexcept;
  WithheldFiles& operator=(WithheldFiles&& other) noexcept;
  WithheldFiles(const WithheldFiles&) = delete;
  WithheldFiles& operator=(const WithheldFiles&) = delete;
  ~WithheldFiles();

  // The ruleset's descriptor (close-on-exec), for SpawnOptions::landlock_ruleset_fd.
  int fd() const { return fd_; }
  // The paths withheld, resolved.
  const std::vector<std::string>& paths() const { return paths_; }
  // How many allow rules the ruleset holds.
  int rules() const { return rules_; }

 private:
  WithheldFiles(int fd, std::vector<std::string> paths, int rules)
      : fd_(fd), paths_(std::move(paths)), rules_(rules) {}

  int fd_ = -1;
  std::vector<std::string> paths_;
  int rules_ = 0;
};

}  // namespace mlcd
