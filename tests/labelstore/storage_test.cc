// Unit tests of the label store's storage layer (real RocksDB in a temp dir) and of request
// validation.
#include "labelstore/storage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "clients/labelstore_limits.h"
#include "tests/testing/process.h"

namespace mlcd::labelstore {
namespace {

using testing::TempDir;

v1::CreateLabelSetRequest CreateRequest(const std::string& name, int32_t k, int32_t l,
                                        bool scores = false) {
  v1::CreateLabelSetRequest r;
  r.set_name(name);
  r.set_num_classes(k);
  r.set_labels_per_sample(l);
  r.set_with_scores(scores);
  return r;
}

// Deterministic row of `id` for version `v`: labels in [0, k).
int32_t LabelOf(uint64_t id, int c, int v, int32_t k) {
  return static_cast<int32_t>(
      (id * 7919 + static_cast<uint64_t>(c) * 104729 + static_cast<uint64_t>(v) * 13) % k);
}

v1::WriteLabelsRequest Message(const std::vector<uint64_t>& ids, int l, int32_t k, int version = 0,
                               bool scores = false) {
  v1::WriteLabelsRequest m;
  for (uint64_t id : ids) {
    m.add_sample_ids(id);
    for (int c = 0; c < l; ++c) {
      m.add_labels(LabelOf(id, c, version, k));
      if (scores) m.add_scores(static_cast<float>(LabelOf(id, c, version, k)) / k);
    }
  }
  return m;
}

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void Open(size_t target_block_bytes = size_t{128} << 10) {
    storage_.reset();
    LabelStorageOptions options;
    options.data_dir = dir_.Sub("db");
    options.block_cache_bytes = 16 << 20;
    options.target_block_bytes = target_block_bytes;
    auto opened = LabelStorage::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    storage_ = std::move(opened).value();
  }
  v1::GetLabelsResponse Get(const std::string& name, const std::vector<uint64_t>& ids,
                            bool scores = false) {
    v1::GetLabelsResponse response;
    Status s = storage_->GetLabels(name, ids.data(), ids.size(), scores, &response);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return response;
  }

  TempDir dir_;
  std::unique_ptr<LabelStorage> storage_;
};

TEST_F(StorageTest, CreateDescribeListDelete) {
  auto req = CreateRequest("job/a/r0", 100, 4);
  (*req.mutable_metadata())["centroids"] = "/x/c.npy";
  auto info = storage_->Create(req);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_OPEN);
  EXPECT_EQ(info->num_samples(), 0u);
  EXPECT_GT(info->created_unix_ms(), 0);
  EXPECT_EQ(info->metadata().at("centroids"), "/x/c.npy");

  EXPECT_EQ(storage_->Create(req).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(storage_->Create(CreateRequest("job/b/r0", 10, 1)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("other", 10, 1)).ok());

  v1::ListLabelSetsRequest list;
  list.set_name_prefix("job/");
  auto listed = storage_->List(list);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->label_sets_size(), 2);
  EXPECT_EQ(listed->label_sets(0).name(), "job/a/r0");
  EXPECT_EQ(listed->label_sets(1).name(), "job/b/r0");

  auto deleted = storage_->Delete("job/a/r0", false);
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(deleted->deleted());
  EXPECT_EQ(storage_->Describe("job/a/r0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->Delete("job/a/r0", false).status().code(), StatusCode::kNotFound);
  auto missing_ok = storage_->Delete("job/a/r0", true);
  ASSERT_TRUE(missing_ok.ok());
  EXPECT_FALSE(missing_ok->deleted());
}

TEST_F(StorageTest, ListPagesInNameOrder) {
  for (int i = 0; i < 7; ++i)
    ASSERT_TRUE(storage_->Create(CreateRequest("p/" + std::to_string(i), 5, 1)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("q", 5, 1)).ok());
  v1::ListLabelSetsRequest req;
  req.set_name_prefix("p/");
  req.set_page_size(3);
  std::vector<std::string> names;
  for (int page = 0; page < 5; ++page) {
    auto r = storage_->List(req);
    ASSERT_TRUE(r.ok());
    for (const auto& s : r->label_sets()) names.push_back(s.name());
    if (r->next_page_token().empty()) break;
    req.set_page_token(r->next_page_token());
  }
  ASSERT_EQ(names.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(names[i], "p/" + std::to_string(i));
  req.set_page_size(-1);
  EXPECT_EQ(storage_->List(req).status().code(), StatusCode::kInvalidArgument);
  req.set_page_size(1001);
  EXPECT_EQ(storage_->List(req).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StorageTest, WriteThenReadInRequestOrderWithMissing) {
  ASSERT_TRUE(storage_->Create(CreateRequest("s", 1000, 8)).ok());
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 10000; ++id) ids.push_back(id);
  auto w = storage_->Write("s", Message(ids, 8, 1000));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->rows_written, 10000u);
  EXPECT_EQ(w->num_samples, 10000u);

  // Request order, duplicates in a read, ids across block boundaries, missing ids.
  std::vector<uint64_t> query = {9999, 0, 4095, 4096, 123456789, 17, 17, 10000, 8191};
  auto r = Get("s", query);
  ASSERT_EQ(r.labels_per_sample(), 8);
  ASSERT_EQ(r.labels_size(), static_cast<int>(query.size() * 8));
  std::vector<uint32_t> expected_missing = {4, 7};
  ASSERT_EQ(r.missing_indices_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.missing_indices(i), expected_missing[i]);
    EXPECT_EQ(r.missing_ids(i), query[expected_missing[i]]);
  }
  for (size_t i = 0; i < query.size(); ++i) {
    bool missing = i == 4 || i == 7;
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(r.labels(static_cast<int>(i * 8 + c)), missing ? -1 : LabelOf(query[i], c, 0, 1000))
          << i << "," << c;
    }
  }
  auto info = storage_->Describe("s");
  EXPECT_EQ(info->num_samples(), 10000u);
  EXPECT_EQ(info->sample_id_end(), 10000u);
  EXPECT_GT(info->size_bytes(), 0u);
}

TEST_F(StorageTest, RewriteReplacesRowsAndCountsDistinctIds) {
  ASSERT_TRUE(storage_->Create(CreateRequest("s", 50, 3)).ok());
  ASSERT_TRUE(storage_->Write("s", Message({1, 2, 3}, 3, 50, 0)).ok());
  auto w = storage_->Write("s", Message({3, 4}, 3, 50, 1));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->new_samples, 1u);
  EXPECT_EQ(w->num_samples, 4u);
  auto r = Get("s", {1, 3, 4});
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(r.labels(c), LabelOf(1, c, 0, 50));
    EXPECT_EQ(r.labels(3 + c), LabelOf(3, c, 1, 50));
    EXPECT_EQ(r.labels(6 + c), LabelOf(4, c, 1, 50));
  }
}

TEST_F(StorageTest, ScoresRoundTripAndNaNForMissing) {
  ASSERT_TRUE(storage_->Create(CreateRequest("s", 100, 2, /*scores=*/true)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("plain", 100, 2)).ok());
  ASSERT_TRUE(storage_->Write("s", Message({5, 6}, 2, 100, 0, true)).ok());
  auto r = Get("s", {6, 7}, /*scores=*/true);
  ASSERT_EQ(r.scores_size(), 4);
  EXPECT_FLOAT_EQ(r.scores(0), static_cast<float>(LabelOf(6, 0, 0, 100)) / 100);
  EXPECT_FLOAT_EQ(r.scores(1), static_cast<float>(LabelOf(6, 1, 0, 100)) / 100);
  EXPECT_TRUE(std::isnan(r.scores(2)));
  EXPECT_EQ(r.labels(2), -1);
  // Without with_scores no scores come back.
  EXPECT_EQ(Get("s", {6}).scores_size(), 0);
  v1::GetLabelsResponse response;
  uint64_t id = 6;
  EXPECT_EQ(storage_->GetLabels("plain", &id, 1, true, &response).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(StorageTest, BadBatchChangesNothing) {
  ASSERT_TRUE(storage_->Create(CreateRequest("s", 10, 2)).ok());
  ASSERT_TRUE(storage_->Write("s", Message({0, 1, 2}, 2, 10, 0)).ok());
  // Rewrites ids 0..2 and adds 3, but the last label is out of range: nothing may change.
  v1::WriteLabelsRequest bad = Message({0, 1, 2, 3}, 2, 10, 5);
  bad.set_labels(7, 10);
  Status s = storage_->Write("s", bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside [0, 10)"), std::string::npos) << s.message();
  auto r = Get("s", {0, 1, 2, 3});
  for (int id = 0; id < 3; ++id) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(r.labels(id * 2 + c), LabelOf(id, c, 0, 10));
  }
  ASSERT_EQ(r.missing_indices_size(), 1);
  EXPECT_EQ(r.missing_ids(0), 3u);
  EXPECT_EQ(storage_->Describe("s")->num_samples(), 3u);
}

TEST_F(StorageTest, SealMakesImmutable) {
  ASSERT_TRUE(storage_->Create(CreateRequest("s", 10, 1)).ok());
  ASSERT_TRUE(storage_->Write("s", Message({0}, 1, 10)).ok());
  auto sealed = storage_->Seal("s", true);
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->state(), v1::LABEL_SET_STATE_SEALED);
  EXPECT_GT(sealed->sealed_unix_ms(), 0);
  EXPECT_EQ(storage_->Write("s", Message({1}, 1, 10)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(storage_->Seal("s", false).ok());  // idempotent
  EXPECT_EQ(storage_->Seal("s", true).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(storage_->Seal("nope", false).status().code(), StatusCode::kNotFound);
  storage_->WaitForBackgroundWork();
  EXPECT_EQ(Get("s", {0}).labels(0), LabelOf(0, 0, 0, 10));
}

TEST_F(StorageTest, EverythingSurvivesReopen) {
  ASSERT_TRUE(storage_->Create(CreateRequest("open", 100, 4)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("sealed", 100, 4, true)).ok());
  ASSERT_TRUE(storage_->Write("open", Message({1, 2, 3}, 4, 100)).ok());
  ASSERT_TRUE(storage_->Write("sealed", Message({7, 8}, 4, 100, 0, true)).ok());
  ASSERT_TRUE(storage_->Seal("sealed", false).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("gone", 100, 4)).ok());
  ASSERT_TRUE(storage_->Write("gone", Message({1}, 4, 100)).ok());
  ASSERT_TRUE(storage_->Delete("gone", false).ok());
  Open();
  EXPECT_EQ(storage_->num_sets(), 2u);
  auto open = storage_->Describe("open");
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->num_samples(), 3u);
  EXPECT_EQ(open->state(), v1::LABEL_SET_STATE_OPEN);
  EXPECT_EQ(storage_->Describe("sealed")->state(), v1::LABEL_SET_STATE_SEALED);
  auto r = Get("sealed", {8}, true);
  EXPECT_EQ(r.labels(3), LabelOf(8, 3, 0, 100));
  EXPECT_FLOAT_EQ(r.scores(3), static_cast<float>(LabelOf(8, 3, 0, 100)) / 100);
  // A new set with a deleted set's name starts empty (set ids are never reused).
  ASSERT_TRUE(storage_->Create(CreateRequest("gone", 100, 4)).ok());
  EXPECT_EQ(Get("gone", {1}).missing_indices_size(), 1);
  EXPECT_EQ(storage_->Write("sealed", Message({1}, 4, 100, 0, true)).status().code(),
            StatusCode::kFailedPrecondition);
}

// A WriteLabels stream that outlived a delete + re-create of its set wrote into the
// new set. A stream is bound to the set id its first message wrote; set ids are never reused
// (and are in every set record since the first format, so old stores need nothing new).
TEST_F(StorageTest, AStreamBoundToADeletedSetWritesNothingIntoItsSuccessor) {
  ASSERT_TRUE(storage_->Create(CreateRequest("x", 10, 2)).ok());
  auto first = storage_->Write("x", Message({0, 1}, 2, 10));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const uint64_t old_id = first->set_id;
  ASSERT_NE(old_id, 0u);
  // Its next message, still on the same set: fine.
  ASSERT_TRUE(storage_->Write("x", Message({2}, 2, 10), old_id).ok());

  ASSERT_TRUE(storage_->Delete("x", false).ok());
  Status deleted = storage_->Write("x", Message({3}, 2, 10), old_id).status();
  EXPECT_EQ(deleted.code(), StatusCode::kAborted) << deleted.ToString();
  EXPECT_NE(deleted.message().find("was deleted while this WriteLabels stream was open"),
            std::string::npos)
      << deleted.message();

  ASSERT_TRUE(storage_->Create(CreateRequest("x", 10, 2)).ok());
  Status recreated = storage_->Write("x", Message({4, 5}, 2, 10), old_id).status();
  EXPECT_EQ(recreated.code(), StatusCode::kAborted) << recreated.ToString();
  EXPECT_NE(recreated.message().find("deleted and created again"), std::string::npos)
      << recreated.message();
  EXPECT_NE(recreated.message().find("Restart the write"), std::string::npos);
  EXPECT_EQ(storage_->Describe("x")->num_samples(), 0u) << "the stale stream wrote into the new x";
  EXPECT_EQ(Get("x", {4, 5}).missing_indices_size(), 2);

  // A new stream binds to the new set, across a reopen too; the old binding stays refused.
  auto fresh = storage_->Write("x", Message({6}, 2, 10));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->set_id, old_id);
  Open();
  EXPECT_TRUE(storage_->Write("x", Message({7}, 2, 10), fresh->set_id).ok());
  EXPECT_EQ(storage_->Write("x", Message({8}, 2, 10), old_id).status().code(),
            StatusCode::kAborted);
  EXPECT_EQ(storage_->Describe("x")->num_samples(), 2u);
}

// Random writes (sparse and dense ids, several block sizes, rewrites) against a std::map model.
TEST_F(StorageTest, RandomWritesMatchModel) {
  for (size_t target : {size_t{256}, size_t{4} << 10, size_t{128} << 10}) {
    Open(target);
    const std::string name = "model/" + std::to_string(target);
    const int l = 3;
    const int32_t k = 97;
    ASSERT_TRUE(storage_->Create(CreateRequest(name, k, l, true)).ok());
    std::map<uint64_t, int> model;  // id -> version
    std::mt19937_64 rng(target);
    for (int round = 0; round < 30; ++round) {
      std::map<uint64_t, bool> chosen;
      const int n = 1 + static_cast<int>(rng() % 300);
      while (static_cast<int>(chosen.size()) < n) {
        chosen[rng() % 3 == 0 ? rng() % (uint64_t{1} << 40) : rng() % 5000] = true;
      }
      if (round == 5) {
        for (uint64_t d = 0; d < 4; ++d) chosen[~uint64_t{0} - d] = true;  // ids near 2^64
      }
      std::vector<uint64_t> ids;
      for (auto& [id, _] : chosen) ids.push_back(id);
      std::shuffle(ids.begin(), ids.end(), rng);
      ASSERT_TRUE(storage_->Write(name, Message(ids, l, k, round, true)).ok());
      for (uint64_t id : ids) model[id] = round;
    }
    EXPECT_EQ(storage_->Describe(name)->num_samples(), model.size());
    std::vector<uint64_t> query;
    for (auto& [id, _] : model) {
      query.push_back(id);
      query.push_back(id + 1);  // often missing
    }
    std::shuffle(query.begin(), query.end(), rng);
    query.resize(std::min<size_t>(query.size(), kMaxIdsPerRead));
    // The read path groups ids by block three ways: ids near 2^64 (pairs), ids spread up to
    // 2^40 (packed sort keys), and dense ids (counting sort).
    std::vector<uint64_t> spread, dense;
    for (uint64_t id : query) {
      if (id < (uint64_t{1} << 41)) spread.push_back(id);
      if (id < 6000) dense.push_back(id);
    }
    for (const auto* q : {&query, &spread, &dense}) {
      auto r = Get(name, *q, true);
      size_t next_missing = 0;
      for (size_t i = 0; i < q->size(); ++i) {
        const uint64_t id = (*q)[i];
        auto it = model.find(id);
        if (it == model.end()) {
          ASSERT_LT(next_missing, static_cast<size_t>(r.missing_indices_size()));
          EXPECT_EQ(r.missing_indices(static_cast<int>(next_missing)), i);
          EXPECT_EQ(r.missing_ids(static_cast<int>(next_missing)), id);
          ++next_missing;
          EXPECT_EQ(r.labels(static_cast<int>(i * l)), -1);
          continue;
        }
        for (int c = 0; c < l; ++c) {
          ASSERT_EQ(r.labels(static_cast<int>(i * l + c)), LabelOf(id, c, it->second, k)) << id;
          ASSERT_FLOAT_EQ(r.scores(static_cast<int>(i * l + c)),
                          static_cast<float>(LabelOf(id, c, it->second, k)) / k);
        }
      }
      EXPECT_EQ(next_missing, static_cast<size_t>(r.missing_indices_size()));
    }
  }
}

TEST_F(StorageTest, BlockSizeFollowsRowWidth) {
  ASSERT_TRUE(storage_->Create(CreateRequest("l8", 100, 8)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("l8s", 100, 8, true)).ok());
  ASSERT_TRUE(storage_->Create(CreateRequest("l1024", 2000, 1024)).ok());
  EXPECT_EQ(*storage_->BlockRows("l8"), 4096);
  EXPECT_EQ(*storage_->BlockRows("l8s"), 2048);
  EXPECT_EQ(*storage_->BlockRows("l1024"), 64);
}

// Readers see each row either missing or complete while a writer rewrites rows.
TEST_F(StorageTest, ConcurrentReadsSeeWholeRows) {
  const int l = 16;
  const int32_t k = 1 << 20;
  ASSERT_TRUE(storage_->Create(CreateRequest("c", k, l)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    std::vector<uint64_t> ids(512);
    v1::GetLabelsResponse r;
    std::mt19937_64 rng(1);
    while (!stop) {
      for (auto& id : ids) id = rng() % 20000;
      if (!storage_->GetLabels("c", ids.data(), ids.size(), false, &r).ok()) {
        ++bad;
        continue;  // the response is not filled in
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        // All l labels of a row come from one version: label c - label 0 is fixed by (id, c).
        int32_t first = r.labels(static_cast<int>(i * l));
        if (first == -1) continue;
        int version = -1;
        for (int v = 0; v < 20 && version < 0; ++v) {
          if (LabelOf(ids[i], 0, v, k) == first) version = v;
        }
        if (version < 0) ++bad;
        for (int c = 1; c < l && version >= 0; ++c) {
          if (r.labels(static_cast<int>(i * l + c)) != LabelOf(ids[i], c, version, k)) ++bad;
        }
      }
    }
  });
  // No ASSERT until the reader is joined: returning early would destroy the thread (and the
  // storage it reads) while it runs.
  bool write_failed = false;
  for (int v = 0; v < 20 && !write_failed; ++v) {
    std::vector<uint64_t> ids;
    for (uint64_t id = 0; id < 20000; ++id) ids.push_back(id);
    for (size_t b = 0; b < ids.size() && !write_failed; b += 5000) {
      std::vector<uint64_t> part(ids.begin() + b, ids.begin() + b + 5000);
      Status s = storage_->Write("c", Message(part, l, k, v)).status();
      EXPECT_TRUE(s.ok()) << s.ToString();
      write_failed = !s.ok();
    }
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
}

// Writers of one set run concurrently (the gang's ranks); several writing rows of the same
// blocks at once must not lose a row or miscount: every row and the counters are exact, also
// after reopening. Blocks of 64 rows and interleaved ids put all 8 writers on every block;
// seven writers send runs of ids (~13 blocks a message: block locks), the eighth scattered
// ids (100 blocks a message: the whole-set lock), so both paths race each other.
TEST_F(StorageTest, ConcurrentWritersOfSharedBlocksLoseNoRow) {
  Open(/*target_block_bytes=*/64 * 64);  // l = 8 with scores: 64-byte rows, 64 rows per block
  const int l = 8, writers = 8, messages = 20, rows_per_message = 100;
  const int32_t k = 1000;
  ASSERT_TRUE(storage_->Create(CreateRequest("gang", k, l, true)).ok());
  ASSERT_EQ(*storage_->BlockRows("gang"), 64);
  const uint64_t n = static_cast<uint64_t>(writers) * messages * rows_per_message;
  std::atomic<uint64_t> new_samples{0};
  std::vector<Status> results(writers);
  std::vector<std::thread> threads;
  for (int r = 0; r < writers; ++r) {
    threads.emplace_back([&, r] {
      // Writer r owns the ids j * writers + r, j < messages * rows_per_message.
      for (int m = 0; m < messages; ++m) {
        std::vector<uint64_t> ids;
        for (int i = 0; i < rows_per_message; ++i) {
          const int j = r != writers - 1 ? m * rows_per_message + i : i * messages + m;
          ids.push_back(static_cast<uint64_t>(j * writers + r));
        }
        auto w = storage_->Write("gang", Message(ids, l, k, 0, true));
        if (!w.ok()) {
          results[r] = w.status();
          return;
        }
        new_samples += w->new_samples;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(new_samples.load(), n);
  for (int reopen = 0; reopen < 2; ++reopen) {
    if (reopen == 1) Open(64 * 64);
    auto info = storage_->Describe("gang");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->num_samples(), n);
    EXPECT_EQ(info->sample_id_end(), n);
    std::vector<uint64_t> ids(n);
    for (uint64_t i = 0; i < n; ++i) ids[i] = i;
    v1::GetLabelsResponse got = Get("gang", ids, true);
    EXPECT_EQ(got.missing_indices_size(), 0);
    v1::WriteLabelsRequest want = Message(ids, l, k, 0, true);
    ASSERT_EQ(got.labels_size(), want.labels_size());
    int wrong = 0;
    for (int i = 0; i < want.labels_size(); ++i) {
      wrong += got.labels(i) != want.labels(i) || got.scores(i) != want.scores(i);
    }
    EXPECT_EQ(wrong, 0) << "reopen " << reopen;
  }
}

// A Seal racing with writers: each message is committed whole before the seal (its rows all
// there) or refused whole after it (FAILED_PRECONDITION, none of its rows), and the sealed
// set counts exactly the committed rows.
TEST_F(StorageTest, SealDuringConcurrentWritesKeepsWholeMessages) {
  Open(/*target_block_bytes=*/64 * 32);  // l = 8 without scores: 64 rows per block
  const int l = 8, writers = 4, rows_per_message = 50;
  const int32_t k = 1000;
  ASSERT_TRUE(storage_->Create(CreateRequest("s", k, l)).ok());
  std::vector<std::vector<uint64_t>> committed(writers), refused(writers);
  std::vector<Status> unexpected(writers);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < writers; ++r) {
    threads.emplace_back([&, r] {
      for (int m = 0; m < 100000; ++m) {
        std::vector<uint64_t> ids;
        for (int i = 0; i < rows_per_message; ++i)
          ids.push_back(static_cast<uint64_t>((m * rows_per_message + i) * writers + r));
        Status s = storage_->Write("s", Message(ids, l, k)).status();
        ++started;
        auto& into = s.ok() ? committed[r] : refused[r];
        into.insert(into.end(), ids.begin(), ids.end());
        if (!s.ok()) {
          if (s.code() != StatusCode::kFailedPrecondition) unexpected[r] = s;
          return;
        }
      }
    });
  }
  while (started.load() < 40) std::this_thread::yield();
  auto sealed = storage_->Seal("s", true);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  uint64_t rows = 0;
  for (int r = 0; r < writers; ++r) {
    EXPECT_TRUE(unexpected[r].ok()) << unexpected[r].ToString();
    EXPECT_EQ(refused[r].size(), static_cast<size_t>(rows_per_message)) << "writer " << r;
    rows += committed[r].size();
    // A writer the scheduler started late may have committed nothing before the seal.
    if (!committed[r].empty()) {
      EXPECT_EQ(Get("s", committed[r]).missing_indices_size(), 0) << "writer " << r;
    }
    v1::GetLabelsResponse got = Get("s", refused[r]);
    EXPECT_EQ(got.missing_indices_size(), rows_per_message) << "writer " << r;
  }
  EXPECT_GT(rows, 0u);
  EXPECT_EQ(sealed->num_samples(), rows);
  EXPECT_EQ(storage_->Describe("s")->num_samples(), rows);
}

// ---------------------------------------------------------------------------------------
// Validation

TEST(ValidationTest, Names) {
  EXPECT_TRUE(ValidateLabelSetName("job/abc-123/r0").ok());
  EXPECT_TRUE(ValidateLabelSetName("a.b_c").ok());
  EXPECT_TRUE(ValidateLabelSetName(std::string(kMaxNameLength, 'x')).ok());
  for (const std::string bad :
       {"", "a b", "/lead", "trail/", "a//b", "ü", "x\n", "..", "a/../b", "./a", "a/..", "a/."}) {
    Status s = ValidateLabelSetName(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_EQ(ValidateLabelSetName(std::string(kMaxNameLength + 1, 'x')).code(),
            StatusCode::kInvalidArgument);
}

TEST(ValidationTest, CreateShape) {
  EXPECT_TRUE(ValidateCreateRequest(CreateRequest("s", 10, 8)).ok());
  EXPECT_EQ(ValidateCreateRequest(CreateRequest("s", 0, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateCreateRequest(CreateRequest("s", 10, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateCreateRequest(CreateRequest("s", 5000, 1025)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateCreateRequest(CreateRequest("s", 4, 8)).code(), StatusCode::kInvalidArgument);
  auto many = CreateRequest("s", 10, 1);
  for (size_t i = 0; i <= kMaxMetadataEntries; ++i)
    (*many.mutable_metadata())["k" + std::to_string(i)] = "v";
  EXPECT_EQ(ValidateCreateRequest(many).code(), StatusCode::kInvalidArgument);
}

TEST(ValidationTest, WriteMessages) {
  std::vector<uint64_t> scratch;
  const LabelSetShape shape{10, 2, false};
  const LabelSetShape scored{10, 2, true};
  EXPECT_TRUE(ValidateWriteMessage(Message({1, 2}, 2, 10), shape, &scratch).ok());
  auto expect_invalid = [&](const v1::WriteLabelsRequest& m, const LabelSetShape& sh,
                            const std::string& words) {
    Status s = ValidateWriteMessage(m, sh, &scratch);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  expect_invalid(v1::WriteLabelsRequest(), shape, "empty batch");
  auto wide = Message({1}, 2, 10);
  wide.add_labels(3);
  expect_invalid(wide, shape, "wrong row width");
  auto narrow = Message({1}, 2, 10);
  narrow.mutable_labels()->RemoveLast();
  expect_invalid(narrow, shape, "wrong row width");
  auto high = Message({1}, 2, 10);
  high.set_labels(1, 10);
  expect_invalid(high, shape, "outside [0, 10)");
  auto negative = Message({1}, 2, 10);
  negative.set_labels(0, -1);
  expect_invalid(negative, shape, "outside [0, 10)");
  expect_invalid(Message({3, 4, 3}, 2, 10), shape, "duplicate ids");
  expect_invalid(Message({1}, 2, 10, 0, true), shape, "scores mismatch");
  expect_invalid(Message({1}, 2, 10), scored, "scores mismatch");
  auto nan = Message({1}, 2, 10, 0, true);
  nan.set_scores(0, std::nanf(""));
  expect_invalid(nan, scored, "not finite");
  std::vector<uint64_t> big(kMaxRowsPerWriteMessage + 1);
  for (size_t i = 0; i < big.size(); ++i) big[i] = i;
  v1::WriteLabelsRequest oversized;
  oversized.mutable_sample_ids()->Add(big.begin(), big.end());
  expect_invalid(oversized, LabelSetShape{10, 1, false}, "too large");
  EXPECT_EQ(MaxRowsPerMessage(1024), kMaxValuesPerMessage / 1024);
}

TEST(ValidationTest, ReadSize) {
  EXPECT_TRUE(ValidateReadSize(1, 8).ok());
  EXPECT_TRUE(ValidateReadSize(kMaxIdsPerRead, 8).ok());
  EXPECT_EQ(ValidateReadSize(0, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateReadSize(kMaxIdsPerRead + 1, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateReadSize(kMaxIdsPerRead, 1024).code(), StatusCode::kInvalidArgument);
}

TEST(StorageOpenTest, SecondOpenOfSameDirIsUnavailable) {
  TempDir dir;
  LabelStorageOptions options;
  options.data_dir = dir.Sub("db");
  auto first = LabelStorage::Open(options);
  ASSERT_TRUE(first.ok());
  auto second = LabelStorage::Open(options);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
}

}  // namespace
}  // namespace mlcd::labelstore
