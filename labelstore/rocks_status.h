// RocksDB statuses as the label store's Status values (common/status.h), with what was being
// done: NOT_FOUND, DATA_LOSS (corruption), UNAVAILABLE (I/O error, no space, or the data dir
// locked by another mlcd-labelstore, saying so), INTERNAL otherwise.
#pragma once

#include <string>

#include "common/status.h"

namespace rocksdb {
class Status;
}  // namespace rocksdb

namespace mlcd::labelstore {

Status FromRocks(const rocksdb::Status& s, const std::string& what);

}  // namespace mlcd::labelstore
