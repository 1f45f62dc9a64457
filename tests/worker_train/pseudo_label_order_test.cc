// The feature-aware order (worker/train/pseudo_label_order.h) against its contract: one
// pseudo-label per global batch, every sample once an epoch, groups visited in turn, partial
// batches for small groups, the same order for a seed, resumable, disjoint rank shares.
#include "worker/train/pseudo_label_order.h"

#include <gtest/gtest.h>

#include <memory>

#include <map>
#include <set>
#include <vector>

#include "worker/train/sample_order.h"
#include "worker/train/stage_pseudo_labels.h"

namespace mlcd::worker {
namespace {

// 103 samples over 6 pseudo-labels of sizes 40, 25, 20, 9, 8, 1 (interleaved ids); with B = 8
// the groups make 5 + 4 + 3 + 2 + 1 + 1 = 16 batches.
std::vector<int64_t> Labels() {
  const std::vector<std::pair<int64_t, int>> sizes = {{70, 40},  {-3, 25}, {5, 20},
                                                      {1000, 9}, {2, 8},   {77, 1}};
  std::vector<int64_t> labels;
  std::vector<int> left;
  for (const auto& s : sizes) left.push_back(s.second);
  for (bool any = true; any;) {
    any = false;
    for (size_t g = 0; g < sizes.size(); ++g) {
      if (left[g] == 0) continue;
      labels.push_back(sizes[g].first);
      --left[g];
      any = true;
    }
  }
  return labels;
}

PseudoLabelOrder Make(const std::vector<int64_t>& labels, int64_t batch, uint64_t seed, int epoch) {
  auto order = PseudoLabelOrder::Make(labels, {batch, seed, epoch});
  EXPECT_TRUE(order.ok()) << order.status().ToString();
  return *order;
}

TEST(PseudoLabelOrderTest, EveryBatchIsOnePseudoLabelAndEverySampleComesOnce) {
  const std::vector<int64_t> labels = Labels();
  ASSERT_EQ(labels.size(), 103u);
  const PseudoLabelOrder order = Make(labels, 8, 42, 0);
  EXPECT_EQ(order.num_groups(), 6);
  EXPECT_EQ(order.num_batches(), 16);
  std::multiset<int64_t> seen;
  std::map<int64_t, std::vector<int64_t>> batch_sizes;  // per pseudo-label, in order
  for (int64_t s = 0; s < order.num_batches(); ++s) {
    const std::vector<int64_t> batch = order.GlobalBatch(s);
    ASSERT_FALSE(batch.empty());
    ASSERT_LE(batch.size(), 8u);
    for (int64_t id : batch) EXPECT_EQ(labels[id], labels[batch[0]]) << "batch " << s;
    seen.insert(batch.begin(), batch.end());
    batch_sizes[labels[batch[0]]].push_back(static_cast<int64_t>(batch.size()));
  }
  EXPECT_EQ(seen.size(), 103u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 103u);
  // Full batches first, the group's remainder last; a group smaller than B is one batch.
  EXPECT_EQ(batch_sizes[70], (std::vector<int64_t>{8, 8, 8, 8, 8}));
  EXPECT_EQ(batch_sizes[-3], (std::vector<int64_t>{8, 8, 8, 1}));
  EXPECT_EQ(batch_sizes[5], (std::vector<int64_t>{8, 8, 4}));
  EXPECT_EQ(batch_sizes[1000], (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(batch_sizes[2], (std::vector<int64_t>{8}));
  EXPECT_EQ(batch_sizes[77], (std::vector<int64_t>{1}));
}

// The groups in turn: the first 6 batches are the 6 groups; the next visit skips the two
// groups already traversed (sizes 8 and 1).
TEST(PseudoLabelOrderTest, GroupsAreVisitedInTurn) {
  const std::vector<int64_t> labels = Labels();
  const PseudoLabelOrder order = Make(labels, 8, 1, 3);
  std::vector<int64_t> turn;
  for (int s = 0; s < 6; ++s) turn.push_back(labels[order.GlobalBatch(s)[0]]);
  EXPECT_EQ(std::set<int64_t>(turn.begin(), turn.end()).size(), 6u);
  std::vector<int64_t> second;
  for (int64_t g : turn)
    if (g != 2 && g != 77) second.push_back(g);
  for (size_t i = 0; i < second.size(); ++i)
    EXPECT_EQ(labels[order.GlobalBatch(6 + static_cast<int64_t>(i))[0]], second[i]);
}

TEST(PseudoLabelOrderTest, TheSameForASeedAndResumable) {
  const std::vector<int64_t> labels = Labels();
  const PseudoLabelOrder a = Make(labels, 8, 7, 2), b = Make(labels, 8, 7, 2);
  const PseudoLabelOrder other_epoch = Make(labels, 8, 7, 3), other_seed = Make(labels, 8, 8, 2);
  bool epoch_differs = false, seed_differs = false;
  for (int64_t s = 0; s < a.num_batches(); ++s) {
    EXPECT_EQ(a.GlobalBatch(s), b.GlobalBatch(s));
    epoch_differs |= a.GlobalBatch(s) != other_epoch.GlobalBatch(s);
    seed_differs |= a.GlobalBatch(s) != other_seed.GlobalBatch(s);
  }
  EXPECT_TRUE(epoch_differs);
  EXPECT_TRUE(seed_differs);
  // A run stopped after step 5 on 2 ranks and resumed on 3 sees the batches the uninterrupted
  // run would have seen: the rest of the same order, shared out again.
  const PseudoLabelOrder resumed = Make(labels, 8, 7, 2);
  for (int64_t s = 5; s < a.num_batches(); ++s) {
    std::vector<int64_t> joined;
    for (int r = 0; r < 3; ++r) {
      const std::vector<int64_t> share = resumed.RankShare(s, 3, r);
      joined.insert(joined.end(), share.begin(), share.end());
    }
    EXPECT_EQ(joined, a.GlobalBatch(s));
  }
}

TEST(PseudoLabelOrderTest, RankSharesAreDisjointAndCoverEachBatch) {
  const PseudoLabelOrder order = Make(Labels(), 8, 3, 0);
  for (int world : {1, 2, 3, 4, 16}) {
    for (int64_t s = 0; s < order.num_batches(); ++s) {
      const std::vector<int64_t> batch = order.GlobalBatch(s);
      std::vector<int64_t> joined;
      for (int r = 0; r < world; ++r) {
        const std::vector<int64_t> share = order.RankShare(s, world, r);
        EXPECT_LE(share.size(), (batch.size() + world - 1) / world);
        joined.insert(joined.end(), share.begin(), share.end());
      }
      EXPECT_EQ(joined, batch) << "world " << world << ", batch " << s;
    }
  }
}

TEST(PseudoLabelOrderTest, BadInputIsRefused) {
  EXPECT_EQ(PseudoLabelOrder::Make({}, {8, 0, 0}).status().code(), StatusCode::kInvalidArgument);
  auto no_batch = PseudoLabelOrder::Make({1, 2}, {0, 0, 0});
  EXPECT_NE(no_batch.status().message().find("batch size"), std::string::npos);
  auto epoch = PseudoLabelOrder::Make({1, 2}, {4, 0, -1});
  EXPECT_NE(epoch.status().message().find("epoch"), std::string::npos);
  // One group, B larger than the data: one batch of everything.
  const PseudoLabelOrder one = Make({9, 9, 9}, 100, 0, 0);
  EXPECT_EQ(one.num_batches(), 1);
  EXPECT_EQ(one.GlobalBatch(0).size(), 3u);
}

// The loader's and prefetcher's schedule (sample_order.h) with pseudo-labels: every global
// batch (the ranks' shares together) is one pseudo-label, every sample once an epoch, the
// same batches at 1 and 4 ranks, and a run resumed mid-epoch visits what the full run did.
ScheduleOptions PseudoLabelSchedule(int world, int rank) {
  ScheduleOptions o;
  o.seed = 11;
  o.num_samples = 103;
  o.global_batch_size = 8;
  o.round = 1;
  o.first_epoch = 0;
  o.end_epoch = 2;
  o.world_size = world;
  o.rank = rank;
  o.pseudo_labels = std::make_shared<const std::vector<int64_t>>(Labels());
  return o;
}

// The global batches of a schedule: the ranks' shares concatenated, batch by batch.
std::vector<std::vector<int64_t>> GlobalBatches(const ScheduleOptions& base) {
  std::vector<std::vector<int64_t>> batches;
  for (int rank = 0; rank < base.world_size; ++rank) {
    ScheduleOptions o = base;
    o.rank = rank;
    EXPECT_TRUE(ValidateSchedule(o).ok()) << ValidateSchedule(o).ToString();
    BatchSchedule schedule(o);
    batches.resize(static_cast<size_t>(schedule.num_batches()));
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < schedule.num_batches(); ++i) {
      schedule.LocalIds(i, &ids);
      batches[static_cast<size_t>(i)].insert(batches[static_cast<size_t>(i)].end(), ids.begin(),
                                             ids.end());
    }
  }
  return batches;
}

TEST(PseudoLabelScheduleTest, BatchesOfOnePseudoLabelEverySampleOnce) {
  const std::vector<int64_t> labels = Labels();
  const ScheduleOptions o = PseudoLabelSchedule(4, 0);
  EXPECT_EQ(ScheduleStepsPerEpoch(o), 16);  // 5 + 4 + 3 + 2 + 1 + 1
  const auto batches = GlobalBatches(o);
  ASSERT_EQ(batches.size(), 32u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int s = 0; s < 16; ++s) {
      const auto& batch = batches[static_cast<size_t>(epoch * 16 + s)];
      ASSERT_FALSE(batch.empty());
      EXPECT_LE(batch.size(), 8u);
      for (int64_t id : batch) {
        EXPECT_EQ(labels[static_cast<size_t>(id)], labels[static_cast<size_t>(batch[0])]);
        seen.insert(id);
      }
    }
    EXPECT_EQ(seen.size(), 103u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 103u);
  }
  // The same global batches on one rank; another round orders them differently.
  EXPECT_EQ(GlobalBatches(PseudoLabelSchedule(1, 0)), batches);
  ScheduleOptions other = o;
  other.round = 2;
  EXPECT_NE(GlobalBatches(other), batches);
}

TEST(PseudoLabelScheduleTest, ResumesMidEpochAndCapsSteps) {
  const auto full = GlobalBatches(PseudoLabelSchedule(2, 0));
  ScheduleOptions resumed = PseudoLabelSchedule(4, 0);
  resumed.first_epoch = 1;
  resumed.first_step = 5;
  const auto rest = GlobalBatches(resumed);
  ASSERT_EQ(rest.size(), 11u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], full[16 + 5 + i]) << i;
  ScheduleOptions capped = PseudoLabelSchedule(1, 0);
  capped.max_steps_per_epoch = 3;
  EXPECT_EQ(ScheduleStepsPerEpoch(capped), 3);
  EXPECT_EQ(BatchSchedule(capped).num_batches(), 6);
  // One pseudo-label per sample, or the schedule is refused.
  ScheduleOptions wrong = PseudoLabelSchedule(1, 0);
  wrong.num_samples = 100;
  EXPECT_NE(ValidateSchedule(wrong).message().find("103 pseudo-labels for 100 training samples"),
            std::string::npos);
}

// Pseudo-labels of earlier stages' clusterings (stage_pseudo_labels.h): equal exactly when
// every stage agrees, numbered by first appearance; a missing row (-1) is a cluster of its own.
TEST(StagePseudoLabelsTest, CombinesStagesByHand) {
  auto one = CombineStageLabels({{3, 1, 3, 0}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (std::vector<int64_t>{0, 1, 0, 2}));
  auto two = CombineStageLabels({{0, 0, 1, 1, 0, -1}, {5, 6, 5, 5, 5, 6}});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<int64_t>{0, 1, 2, 2, 0, 3}));
  EXPECT_EQ(CombineStageLabels({}).status().code(), StatusCode::kInvalidArgument);
  auto uneven = CombineStageLabels({{0, 1}, {0}});
  EXPECT_NE(uneven.status().message().find("stage 1 labels 1 samples, stage 0 2"),
            std::string::npos);
}

}  // namespace
}  // namespace mlcd::worker
