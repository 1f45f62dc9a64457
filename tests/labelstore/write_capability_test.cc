// Write capabilities (clients/write_capability.h, labelstore/write_grants.h): minted from a
// set's delegation key, they verify for that set and incarnation only, until they expire,
// and no part of one can be changed without the key. The secret they derive from is made
// once per database and survives reopening it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clients/write_capability.h"
#include "common/clock.h"
#include "labelstore/storage.h"
#include "labelstore/write_grants.h"
#include "tests/testing/process.h"

namespace mlcd::labelstore {
namespace {

constexpr char kSet[] = "job/j1/r0";
constexpr char kHolder[] = "job:j1/r0/assign_labels/rank1";

int64_t Now() { return NowUnixMs() / 1000; }

std::string Mint(const WriteGrants& grants, const std::string& name, uint64_t incarnation,
                 int64_t expires, const std::string& holder = kHolder) {
  StatusOr<std::string> cap = MintWriteCapability(grants.DelegationKey(name, incarnation), name,
                                                  incarnation, expires, holder);
  EXPECT_TRUE(cap.ok()) << cap.status().ToString();
  return cap.ok() ? *cap : "";
}

TEST(WriteCapability, VerifiesForItsSetAndIncarnationOnly) {
  const WriteGrants grants(std::string(32, 'k'));
  const std::string cap = Mint(grants, kSet, 7, Now() + 60);
  EXPECT_TRUE(grants.Check(cap, kSet, 7).ok());

  Status other_set = grants.Check(cap, "job/j2/r0", 7);
  EXPECT_EQ(other_set.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_set.message().find("job/j2/r0"), std::string::npos) << other_set.message();
  EXPECT_NE(other_set.message().find(kHolder), std::string::npos) << other_set.message();

  // The same name made again is another incarnation.
  Status recreated = grants.Check(cap, kSet, 8);
  EXPECT_EQ(recreated.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(recreated.message().find("earlier"), std::string::npos) << recreated.message();

  // Another store's secret (or no secret at all) verifies nothing.
  EXPECT_EQ(WriteGrants(std::string(32, 'x')).Check(cap, kSet, 7).code(),
            StatusCode::kPermissionDenied);
}

TEST(WriteCapability, NoPartCanBeChangedWithoutTheKey) {
  const WriteGrants grants(std::string(32, 's'));
  const int64_t expires = Now() + 60;
  const std::string cap = Mint(grants, kSet, 3, expires);
  // mlcdcap1|3|<expires>|<holder>|<mac>
  const std::string later = std::to_string(expires + 86400);
  std::vector<std::string> altered = {
      "mlcdcap1|3|" + later + "|" + kHolder + cap.substr(cap.rfind('|')),
      "mlcdcap1|4|" + std::to_string(expires) + "|" + kHolder + cap.substr(cap.rfind('|')),
      "mlcdcap1|3|" + std::to_string(expires) + "|job:j1/r0/assign_labels/rank0" +
          cap.substr(cap.rfind('|')),
      cap.substr(0, cap.size() - 1) + (cap.back() == '0' ? "1" : "0"),
  };
  for (const std::string& text : altered)
    EXPECT_EQ(grants.Check(text, kSet, 3).code(), StatusCode::kPermissionDenied) << text;
  // A capability minted with the delegation key of another set does not verify here.
  StatusOr<std::string> wrong_key =
      MintWriteCapability(grants.DelegationKey("job/j2/r0", 3), kSet, 3, expires, kHolder);
  ASSERT_TRUE(wrong_key.ok());
  EXPECT_EQ(grants.Check(*wrong_key, kSet, 3).code(), StatusCode::kPermissionDenied);
}

TEST(WriteCapability, ExpiredAndMalformedAreRefused) {
  const WriteGrants grants(std::string(32, 'e'));
  Status expired = grants.Check(Mint(grants, kSet, 1, Now() - 5), kSet, 1);
  EXPECT_EQ(expired.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(expired.message().find("expired"), std::string::npos) << expired.message();
  for (const std::string& text :
       std::vector<std::string>{"", "mlcdcap1", "mlcdcap2|1|9999999999|h|" + std::string(64, 'a'),
                                "mlcdcap1|x|9999999999|h|" + std::string(64, 'a'),
                                "mlcdcap1|1|9999999999|bad holder|" + std::string(64, 'a'),
                                "mlcdcap1|1|9999999999|h|abc|def"}) {
    Status s = grants.Check(text, kSet, 1);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << text;
    EXPECT_NE(s.message().find("malformed"), std::string::npos) << s.message();
  }
  // A holder that would break the text form is refused when minting.
  EXPECT_EQ(MintWriteCapability("k", kSet, 1, Now(), "a|b").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MintWriteCapability("", kSet, 1, Now(), kHolder).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(WriteCapability, TheSecretIsMadeOnceAndSurvivesReopening) {
  testing::TempDir dir;
  LabelStorageOptions options;
  options.data_dir = dir.Sub("db");
  options.block_cache_bytes = 8 << 20;
  std::string first;
  {
    auto storage = LabelStorage::Open(options);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    first = (*storage)->capability_secret();
  }
  EXPECT_EQ(first.size(), 32u);
  auto reopened = LabelStorage::Open(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->capability_secret(), first);

  testing::TempDir other_dir;
  options.data_dir = other_dir.Sub("db");
  auto other = LabelStorage::Open(options);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_NE((*other)->capability_secret(), first);
}

TEST(WriteCapability, OpenIncarnationAsksTheCheckAndRefusesSealedSets) {
  testing::TempDir dir;
  LabelStorageOptions options;
  options.data_dir = dir.Sub("db");
  options.block_cache_bytes = 8 << 20;
  auto opened = LabelStorage::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  LabelStorage& storage = **opened;
  v1::CreateLabelSetRequest create;
  create.set_name(kSet);
  create.set_num_classes(4);
  create.set_labels_per_sample(1);
  ASSERT_TRUE(storage.Create(create, "job:j1").ok());
  std::string seen_owner;
  StatusOr<uint64_t> incarnation =
      storage.OpenIncarnation(kSet, [&](const std::string& owner, uint64_t) {
        seen_owner = owner;
        return Status::Ok();
      });
  ASSERT_TRUE(incarnation.ok()) << incarnation.status().ToString();
  EXPECT_EQ(seen_owner, "job:j1");
  EXPECT_EQ(storage
                .OpenIncarnation(kSet, [](const std::string&,
                                          uint64_t) { return Status::PermissionDenied("no"); })
                .status()
                .code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(storage.Delete(kSet, false).ok());
  ASSERT_TRUE(storage.Create(create, "job:j1").ok());
  StatusOr<uint64_t> again = storage.OpenIncarnation(kSet, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, *incarnation);
  ASSERT_TRUE(storage.Seal(kSet, false).ok());
  EXPECT_EQ(storage.OpenIncarnation(kSet, nullptr).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(storage.OpenIncarnation("job/none", nullptr).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd::labelstore
