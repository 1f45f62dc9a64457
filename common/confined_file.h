// Opening what a request or spec names without a window between the check and the use
// (docs/hardening.md, "Data roots").
//
// DataRoots::Confine checks where a path resolves at one instant; a directory of that path
// swapped for a symbolic link afterwards (by someone who can write inside a root) would
// redirect a later open(2) outside the roots. The functions here check what was actually
// opened instead:
//
//   * reads: the file is opened (O_RDONLY, non-blocking, so a FIFO cannot hang the open), then
//     the kernel's name for the open descriptor (/proc/self/fd/N) must lie under a root; a
//     file reached through a link swapped in after the check is closed unread and refused
//     with the same PERMISSION_DENIED as any path outside the roots (DataRoots::Refusal), so
//     nothing tells a caller whether it exists;
//   * writes: the target directory is opened and verified the same way once, every missing
//     component created with mkdirat() inside an already verified parent and opened with
//     O_NOFOLLOW, and files are then created with openat(dirfd, name, O_CREAT | O_EXCL |
//     O_NOFOLLOW) and renamed with renameat() inside that descriptor, so a directory swapped
//     for a link after the check cannot redirect the write.
//
//   MLCD_ASSIGN_OR_RETURN(UniqueFd fd, OpenConfinedRead(path, "centroids_path", &roots));
//   MLCD_ASSIGN_OR_RETURN(ConfinedDir dir, OpenConfinedDir(out_dir, "output_dir", true, &roots));
//   MLCD_RETURN_IF_ERROR(dir.WriteFileAtomically("result.json", json));
//
// Roots: the pointer given, else the process's (InstallProcessDataRoots: clusterd and the
// worker's confined children install theirs at start-up), else none: a process with no roots
// opens what it is told (tools, tests, a child run by hand), through the same code.
//
// Not caught (as before): hard links and bind mounts are ordinary files and directories to
// the kernel, and a directory moved (renamed, not replaced by a link) out of the roots after
// it was opened is still written through its open descriptor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/data_roots.h"
#include "common/file_util.h"
#include "common/status.h"

namespace mlcd {

// An owned file descriptor (-1 = none). Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// The roots the readers and writers below use when none is passed. Call once at start-up,
// before other threads run; later calls replace them. Null until installed.
void InstallProcessDataRoots(const DataRoots& roots);
const DataRoots* ProcessDataRoots();

// `path` (relative: from the working directory) opened read-only. With roots (given, else the
// process's): the path must pass DataRoots::Confine, and the opened file must lie under a
// root, else PERMISSION_DENIED (DataRoots::Refusal, one message whether or not it exists).
// A missing file under the roots: NOT_FOUND "<path>: no such file"; other open errors name
// the path and the errno.
StatusOr<UniqueFd> OpenConfinedRead(const std::string& path, const std::string& field,
                                    const DataRoots* roots = nullptr);

// OK when `fd` (opened from `path`) lies under a root of `roots`, else DataRoots::Refusal.
Status VerifyOpenedUnderRoots(int fd, const std::string& path, const std::string& field,
                              const DataRoots& roots);

// A directory opened once and verified to lie under the roots; files are created and
// renamed inside the descriptor (see the top of this file).
class ConfinedDir {
 public:
  ConfinedDir() = default;
  ConfinedDir(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  int fd() const { return fd_.get(); }
  // The path it was opened from (for messages).
  const std::string& path() const { return path_; }
  // "<path>/<name>", for messages.
  std::string Join(const std::string& name) const;
  // "/proc/self/fd/<fd>/<name>": pinned to the opened directory, for a library that takes
  // only a path. Valid while this object lives.
  std::string PinnedPath(const std::string& name) const;

  // Writes `parts` to a new temporary file (O_CREAT | O_EXCL | O_NOFOLLOW), fsyncs it, renames
  // it over `name` and fsyncs the directory. `name` is one component (no '/').
  Status WriteFileAtomically(const std::string& name, const std::vector<ConstBuffer>& parts) const;
  Status WriteFileAtomically(const std::string& name, const std::string& contents) const;
  // Creates `name` holding `contents` only when no `name` exists: a temporary file is written
  // and fsynced, then linkat(2)ed to `name`, which fails when it exists. So of two callers
  // racing for one name exactly one wins, and nobody ever sees the file partly written.
  // ALREADY_EXISTS when `name` exists (whatever it is: file, link, directory).
  Status CreateFileExclusively(const std::string& name, const std::string& contents) const;
  // The first `max_bytes` bytes of the regular file `name` (opened with O_NOFOLLOW and
  // non-blocking: a link or a FIFO there is FAILED_PRECONDITION, never followed or waited on);
  // `*truncated` (when given) tells whether more was there. NOT_FOUND when missing.
  StatusOr<std::string> ReadFilePrefix(const std::string& name, size_t max_bytes,
                                       bool* truncated = nullptr) const;
  // The sub-directory `name` (one component), created when missing and `create`; never
  // follows a link there.
  StatusOr<ConfinedDir> SubDir(const std::string& name, bool create) const;
  // renameat() of `from` to `to` (one component each) inside this directory.
  Status Rename(const std::string& from, const std::string& to) const;
  // fsync of the directory.
  Status Sync() const;

 private:
  // A new temporary file beside `name` holding `parts`, fsynced; its name in `*tmp`.
  Status WriteTemporary(const std::string& name, const std::vector<ConstBuffer>& parts,
                        std::string* tmp) const;

  UniqueFd fd_;
  std::string path_;
};

// The directory `path` opened and verified (roots as for OpenConfinedRead). With `create`,
// missing components are made (mkdir -p) one by one inside the deepest existing ancestor,
// which is opened and verified first; a component that is a link is followed only when it
// exists before creation starts (and then the opened result is verified).
StatusOr<ConfinedDir> OpenConfinedDir(const std::string& path, const std::string& field,
                                      bool create, const DataRoots* roots = nullptr);

// The directory of the file `path` opened as OpenConfinedDir does (created when `create`),
// with `*name` set to the file's name; a refusal names `path` itself, as Confine of `path`
// would. INVALID_ARGUMENT when `path` ends in '/' or names no file.
StatusOr<ConfinedDir> OpenConfinedParent(const std::string& path, const std::string& field,
                                         bool create, std::string* name,
                                         const DataRoots* roots = nullptr);

// Whole-file read through OpenConfinedRead.
StatusOr<std::string> ReadConfinedFile(const std::string& path, const std::string& field = "path",
                                       const DataRoots* roots = nullptr);
// WriteFileAtomically of `path` through OpenConfinedParent (its directory must exist).
Status WriteConfinedFile(const std::string& path, const std::vector<ConstBuffer>& parts,
                         const std::string& field = "path", const DataRoots* roots = nullptr);
Status WriteConfinedFile(const std::string& path, const std::string& contents,
                         const std::string& field = "path", const DataRoots* roots = nullptr);
// mkdir -p through OpenConfinedDir(create = true).
Status MakeConfinedDirs(const std::string& path, const std::string& field = "path",
                        const DataRoots* roots = nullptr);

}  // namespace mlcd
