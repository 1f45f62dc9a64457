#include "labelstore/storage_health.h"

#include <rocksdb/env.h>

#include "common/log.h"

namespace mlcd::labelstore {

StorageHealth::StorageHealth(rocksdb::Env* env, std::string dir, uint64_t min_free_bytes)
    : env_(env), dir_(std::move(dir)), min_free_bytes_(min_free_bytes) {}

Status StorageHealth::CheckSpace() {
  uint64_t free = 0;
  if (min_free_bytes_ == 0 || !env_->GetFreeSpace(dir_, &free).ok() || free >= min_free_bytes_) {
    return Status::Ok();
  }
  const std::string what = "only " + std::to_string(free >> 20) + " MiB free in " + dir_ +
                           " (writes need " + std::to_string(min_free_bytes_ >> 20) +
                           " MiB, --min-free-mb)";
  MutexLock lock(&mu_);
  if (failure_.empty()) MLCD_LOG(ERROR) << "label store writes refused: " << what;
  if (!write_failed_) failure_ = what;
  return Status::Unavailable("label store storage: " + what +
                             "; writes resume by themselves once space is freed");
}

Status StorageHealth::Checked(Status status) {
  if (status.code() != StatusCode::kUnavailable) return status;
  MutexLock lock(&mu_);
  if (!write_failed_) {
    MLCD_LOG(ERROR) << "label store write failed (" << status.message()
                    << "); health NOT_SERVING until the database resumes";
  }
  write_failed_ = true;
  failure_ = status.message();
  return status;
}

Status StorageHealth::Get() const {
  MutexLock lock(&mu_);
  if (failure_.empty()) return Status::Ok();
  return Status::Unavailable(
      "label store storage failed: " + failure_ +
      (write_failed_ ? " (resumed automatically when RocksDB can resume, else restart it)"
                     : " (resumed automatically once the disk has room again)"));
}

void StorageHealth::Poll(const std::function<bool()>& resume) {
  bool space_only = false;
  {
    MutexLock lock(&mu_);
    if (failure_.empty()) return;
    space_only = !write_failed_;
  }
  if (space_only) {
    uint64_t free = 0;
    if (env_->GetFreeSpace(dir_, &free).ok() && free < min_free_bytes_) return;
  } else if (!resume()) {
    return;
  }
  MutexLock lock(&mu_);
  MLCD_LOG(INFO) << "label store writes work again (was: " << failure_ << "); SERVING";
  failure_.clear();
  write_failed_ = false;
}

bool StorageHealth::write_failed() const {
  MutexLock lock(&mu_);
  return write_failed_;
}

}  // namespace mlcd::labelstore
