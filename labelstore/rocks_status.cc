#include "labelstore/rocks_status.h"

#include <rocksdb/status.h>

namespace mlcd::labelstore {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNotFound()) return Status::NotFound(what + ": " + s.ToString());
  if (s.IsCorruption()) return Status::DataLoss(what + ": " + s.ToString());
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return Status::Unavailable(
        what + ": " + s.ToString() +
        " (another mlcd-labelstore is using this --data-dir; stop it or pick another dir)");
  }
  if (s.IsIOError() || s.IsNoSpace()) return Status::Unavailable(what + ": " + s.ToString());
  return Status::Internal(what + ": " + s.ToString());
}

}  // namespace mlcd::labelstore
