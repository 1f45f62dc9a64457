// Online backups of the coordinator's state (JobManager::BackupState, job_manager.h;
// docs/deploy.md, "Backups"): a RocksDB checkpoint under <data-dir>/backups, streamed file by
// file and removed again. The checkpoint is consistent on its own (every change is one
// atomic batch), so it needs no lock of the manager: jobs go on while it is taken.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <vector>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/log.h"
#include "coordinator/job_manager.h"

namespace mlcd::coordinator {
namespace {

constexpr size_t kBackupChunkBytes = 1 << 20;

StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::Internal("cannot list " + dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Removes a flat directory (a RocksDB checkpoint has no subdirectories).
void RemoveFlatDir(const std::string& dir) {
  auto names = ListFiles(dir);
  if (names.ok()) {
    for (const auto& n : *names) ::unlink((dir + "/" + n).c_str());
  }
  if (::rmdir(dir.c_str()) != 0) MLCD_LOG(WARNING) << "could not remove " << dir;
}

Status StreamFiles(const std::string& dir, int format_version,
                   const std::function<bool(const v1::BackupChunk&)>& send) {
  MLCD_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListFiles(dir));
  bool first = true;
  std::vector<char> buffer(kBackupChunkBytes);
  for (const auto& name : names) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    if (!in) return Status::Internal("cannot read " + dir + "/" + name);
    bool end = false;
    while (!end) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = static_cast<size_t>(in.gcount());
      end = in.eof() || n < buffer.size();
      if (in.bad()) return Status::Internal("reading " + dir + "/" + name + " failed");
      v1::BackupChunk chunk;
      chunk.set_file(name);
      chunk.set_data(buffer.data(), n);
      chunk.set_end_of_file(end);
      if (first) chunk.set_format_version(format_version);
      first = false;
      if (!send(chunk)) return Status::Cancelled("the client stopped reading the backup");
    }
  }
  return Status::Ok();
}

}  // namespace

Status JobManager::BackupState(const std::function<bool(const v1::BackupChunk&)>& send) {
  static std::atomic<int> counter{0};
  const std::string root = options_.data_dir + "/backups";
  MLCD_RETURN_IF_ERROR(MakeDirs(root));
  const std::string dir = root + "/backup-" + std::to_string(NowUnixMs()) + "-" +
                          std::to_string(::getpid()) + "-" + std::to_string(counter++);
  MLCD_RETURN_IF_ERROR(store_->Checkpoint(dir));
  Status s = StreamFiles(dir, store_->format_version(), send);
  RemoveFlatDir(dir);
  MLCD_LOG(INFO) << "state backup " << (s.ok() ? "sent" : "not completed: " + s.ToString());
  return s;
}

}  // namespace mlcd::coordinator
