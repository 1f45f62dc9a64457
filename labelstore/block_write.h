// One WriteLabels message applied to the blocks of its set (labelstore/block_format.h): the
// rows ordered by id and grouped by block (PlanBlockWrite), then each block read, changed and
// encoded into a RocksDB batch (UpdateBlocks). LabelStorage::Write holds the blocks' locks
// (labelstore/block_locks.h) from before UpdateBlocks until the batch is committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "labelstore/block_format.h"
#include "mlcd/v1/labelstore.pb.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace mlcd::labelstore {

struct BlockWritePlan {
  // (sample id, row in the message), ascending by id.
  std::vector<std::pair<uint64_t, uint32_t>> order;
  // The blocks the message touches, ascending; block b's rows are
  // order[group_begin[b], group_begin[b + 1]).
  std::vector<uint64_t> blocks;
  std::vector<size_t> group_begin;
};

// `message` must be valid (ValidateWriteMessage) and non-empty; a block holds
// 2^block_shift ids.
BlockWritePlan PlanBlockWrite(const v1::WriteLabelsRequest& message, int block_shift);

// Which blocks of which set, in `blocks_cf` of `db`.
struct BlockTarget {
  rocksdb::DB* db = nullptr;
  rocksdb::ColumnFamilyHandle* blocks_cf = nullptr;
  uint64_t set_id = 0;
  std::string set_name;  // for messages
  BlockLayout layout{0, 0, false};
};

// Reads the plan's blocks, sets the message's rows in them and adds the changed blocks to
// `batch`. Returns how many of the ids had no row before; DATA_LOSS for a corrupt block.
StatusOr<uint64_t> UpdateBlocks(const BlockTarget& target, const v1::WriteLabelsRequest& message,
                                const BlockWritePlan& plan, rocksdb::WriteBatch* batch);

}  // namespace mlcd::labelstore
