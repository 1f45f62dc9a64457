#include "labelstore/block_write.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "labelstore/rocks_status.h"

namespace mlcd::labelstore {

BlockWritePlan PlanBlockWrite(const v1::WriteLabelsRequest& message, int block_shift) {
  BlockWritePlan plan;
  const size_t n = static_cast<size_t>(message.sample_ids_size());
  const uint64_t* ids = message.sample_ids().data();
  plan.order.resize(n);
  for (size_t i = 0; i < n; ++i) plan.order[i] = {ids[i], static_cast<uint32_t>(i)};
  std::sort(plan.order.begin(), plan.order.end());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t block = plan.order[i].first >> block_shift;
    if (plan.blocks.empty() || plan.blocks.back() != block) {
      plan.blocks.push_back(block);
      plan.group_begin.push_back(i);
    }
  }
  plan.group_begin.push_back(n);
  return plan;
}

StatusOr<uint64_t> UpdateBlocks(const BlockTarget& target, const v1::WriteLabelsRequest& message,
                                const BlockWritePlan& plan, rocksdb::WriteBatch* batch) {
  const std::vector<uint64_t>& blocks = plan.blocks;
  std::string key_bytes(blocks.size() * kBlockKeyBytes, '\0');
  std::vector<rocksdb::Slice> keys(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    EncodeBlockKey(key_bytes.data() + b * kBlockKeyBytes, target.set_id, blocks[b]);
    keys[b] = rocksdb::Slice(key_bytes.data() + b * kBlockKeyBytes, kBlockKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(blocks.size());
  std::vector<rocksdb::Status> statuses(blocks.size());
  target.db->MultiGet(rocksdb::ReadOptions(), target.blocks_cf, blocks.size(), keys.data(),
                      values.data(), statuses.data(), /*sorted_input=*/true);

  const BlockLayout& layout = target.layout;
  const size_t l = static_cast<size_t>(layout.l);
  const int32_t* labels = message.labels().data();
  const float* scores = layout.scores ? message.scores().data() : nullptr;
  DenseBlock dense;
  std::string encoded;
  uint64_t new_samples = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::string which =
        "block " + std::to_string(blocks[b]) + " of label set '" + target.set_name + "'";
    if (statuses[b].ok()) {
      if (!DecodeDense(values[b].data(), values[b].size(), layout, &dense)) {
        return Status::DataLoss(which + " is corrupt");
      }
    } else if (statuses[b].IsNotFound()) {
      dense.Reset(layout);
    } else {
      return FromRocks(statuses[b], "reading " + which);
    }
    for (size_t i = plan.group_begin[b]; i < plan.group_begin[b + 1]; ++i) {
      const size_t offset = plan.order[i].first & static_cast<uint64_t>(layout.block_rows - 1);
      const size_t row = plan.order[i].second;
      if (dense.SetRow(layout, offset, labels + row * l, scores ? scores + row * l : nullptr))
        ++new_samples;
    }
    EncodeDense(dense, layout, &encoded);
    batch->Put(target.blocks_cf, keys[b], encoded);
  }
  return new_samples;
}

}  // namespace mlcd::labelstore
