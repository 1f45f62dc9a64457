// Small filesystem helpers shared by the services: atomic writes (temp file, fsync, rename,
// fsync of the directory), whole-file reads, recursive mkdir.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mlcd {

struct ConstBuffer {
  const void* data;
  size_t size;
};

// Writes the concatenation of `parts` to `path` so that readers see either the old file or
// the complete new one, never a partial file, even across a crash. The file gets `mode`
// (less the umask): 0600 for one that holds a secret.
Status WriteFileAtomically(const std::string& path, const std::vector<ConstBuffer>& parts,
                           unsigned mode = 0644);
Status WriteFileAtomically(const std::string& path, const std::string& contents,
                           unsigned mode = 0644);

// Writes the concatenation of `parts` to the open `fd` (retrying short writes and EINTR), then
// fsyncs it. `path` names the file in errors.
Status WriteAllAndSync(int fd, const std::vector<ConstBuffer>& parts, const std::string& path);

StatusOr<std::string> ReadFileToString(const std::string& path);

// mkdir -p.
Status MakeDirs(const std::string& path);

// fsync a directory so a rename into it is durable.
Status SyncDir(const std::string& dir);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace mlcd
