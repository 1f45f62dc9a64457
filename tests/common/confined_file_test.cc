// Confined opens (common/confined_file.h): a path checked under the data roots, then
// a directory of it swapped for a symbolic link to a folder outside them (the check-then-use
// race, made deterministic here by swapping between the two steps). Reads and writes through
// the confined primitives must refuse it with the same PERMISSION_DENIED as any path outside
// the roots, and read or create nothing outside. Links that stay inside the roots still work.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/confined_file.h"
#include "common/data_roots.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

class ConfinedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto roots = DataRoots::Make({root_.path()});
    ASSERT_TRUE(roots.ok());
    roots_ = *roots;
    ASSERT_TRUE(MakeDirs(root_.Sub("data")).ok());
    ASSERT_TRUE(MakeDirs(outside_.Sub("data")).ok());
    const float inside[2] = {1, 2}, secret[2] = {7, 7};
    ASSERT_TRUE(WriteNpy(root_.Sub("data/f.npy"), NpyDtype::kFloat32, {2}, inside).ok());
    ASSERT_TRUE(WriteNpy(outside_.Sub("data/f.npy"), NpyDtype::kFloat32, {2}, secret).ok());
  }

  // The check passes, then root/data becomes a link to outside/data.
  void CheckThenSwap(const std::string& path) {
    ASSERT_TRUE(roots_.Confine(path, "field").ok()) << path;
    ASSERT_EQ(::rename(root_.Sub("data").c_str(), root_.Sub("data.old").c_str()), 0);
    ASSERT_EQ(::symlink(outside_.Sub("data").c_str(), root_.Sub("data").c_str()), 0);
  }

  // A refusal with `path` replaced by "<path>", to compare two refusals.
  std::string Refusal(const Status& status, const std::string& path) {
    EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status.ToString();
    std::string m = status.message();
    EXPECT_NE(m.find("is not under a data root"), std::string::npos) << m;
    const size_t at = m.find(path);
    EXPECT_NE(at, std::string::npos) << m;
    if (at != std::string::npos) m.replace(at, path.size(), "<path>");
    EXPECT_EQ(m.find(outside_.path()), std::string::npos) << "names what lies outside: " << m;
    return m;
  }

  // What any path outside the roots gets (an existing one; a missing one reads the same).
  std::string OutsideRefusal(const std::string& field = "field") {
    const std::string a = outside_.Sub("data/f.npy"), b = outside_.Sub("data/none.npy");
    const std::string exists = Refusal(OpenConfinedRead(a, field, &roots_).status(), a);
    EXPECT_EQ(exists, Refusal(OpenConfinedRead(b, field, &roots_).status(), b));
    return exists;
  }

  std::vector<std::string> OutsideEntries() {
    std::vector<std::string> names;
    for (const char* n : {"f.npy", "c.npy", "sub", "x.json"}) {
      // (names of what the refused calls would have made)
      if (PathExists(outside_.Sub(std::string("data/") + n))) names.push_back(n);
    }
    return names;
  }

  TempDir root_, outside_;
  DataRoots roots_;
};

TEST_F(ConfinedFileTest, AReadThroughADirectorySwappedForALinkIsRefusedLikeAnOutsidePath) {
  const std::string path = root_.Sub("data/f.npy");
  CheckThenSwap(path);
  // The race is real: a plain open of the checked path now reaches the file outside.
  auto plain = ReadNpyAsFloat32(path);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[0], 7);

  const std::string outside = OutsideRefusal();
  EXPECT_EQ(Refusal(OpenConfinedRead(path, "field", &roots_).status(), path), outside);
  EXPECT_EQ(Refusal(ReadConfinedFile(path, "field", &roots_).status(), path), outside);
  auto npy = MappedNpy::Open(path, &roots_);
  EXPECT_EQ(npy.status().code(), StatusCode::kPermissionDenied);
  auto floats = ReadNpyAsFloat32(path, nullptr, &roots_);
  EXPECT_EQ(floats.status().code(), StatusCode::kPermissionDenied);
  // A missing file behind the swapped folder reads the same as an existing one.
  const std::string missing = root_.Sub("data/none.npy");
  EXPECT_EQ(Refusal(OpenConfinedRead(missing, "field", &roots_).status(), missing), outside);
}

TEST_F(ConfinedFileTest, AFileSwappedForALinkAfterTheCheckIsRefused) {
  const std::string path = root_.Sub("data/f.npy");
  ASSERT_TRUE(roots_.Confine(path, "field").ok());
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::symlink(outside_.Sub("data/f.npy").c_str(), path.c_str()), 0);
  EXPECT_EQ(Refusal(OpenConfinedRead(path, "field", &roots_).status(), path), OutsideRefusal());
}

TEST_F(ConfinedFileTest, AWriteIntoADirectorySwappedForALinkIsRefusedAndCreatesNothingOutside) {
  const std::string out = root_.Sub("data/c.npy");
  CheckThenSwap(out);
  const std::string outside = OutsideRefusal();
  const float c[2] = {3, 4};
  EXPECT_EQ(Refusal(WriteNpy(out, NpyDtype::kFloat32, {2}, c, &roots_), out),
            OutsideRefusal("path"));
  const std::string json = root_.Sub("data/x.json");
  EXPECT_EQ(Refusal(WriteConfinedFile(json, "{}", "field", &roots_), json), outside);
  const std::string sub = root_.Sub("data/sub/deeper");
  EXPECT_EQ(Refusal(MakeConfinedDirs(sub, "field", &roots_), sub), outside);
  std::string name;
  EXPECT_EQ(Refusal(OpenConfinedParent(out, "field", true, &name, &roots_).status(), out), outside);
  EXPECT_EQ(OutsideEntries(), std::vector<std::string>{"f.npy"});
  // Without the roots the same calls would have written there (the race is real).
  ASSERT_TRUE(WriteNpy(out, NpyDtype::kFloat32, {2}, c).ok());
  EXPECT_TRUE(PathExists(outside_.Sub("data/c.npy")));
}

TEST_F(ConfinedFileTest, AnOpenedDirectoryKeepsItsWritesWhenItsPathIsSwappedAfterwards) {
  auto dir = OpenConfinedDir(root_.Sub("data/ckpt"), "checkpoint_dir", true, &roots_);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  CheckThenSwap(root_.Sub("data/ckpt"));
  // Created, written and renamed inside the descriptor: the original folder, now data.old.
  auto tmp = dir->SubDir(".tmp-1", true);
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  ASSERT_TRUE(tmp->WriteFileAtomically("meta.json", "{}").ok());
  ASSERT_TRUE(dir->Rename(".tmp-1", "ckpt-1").ok());
  ASSERT_TRUE(dir->WriteFileAtomically("LATEST", "ckpt-1\n").ok());
  EXPECT_EQ(*ReadFileToString(root_.Sub("data.old/ckpt/ckpt-1/meta.json")), "{}");
  EXPECT_EQ(*ReadFileToString(root_.Sub("data.old/ckpt/LATEST")), "ckpt-1\n");
  EXPECT_FALSE(PathExists(outside_.Sub("data/ckpt")));
  // The pinned path reaches the opened folder too (for libraries that take a path).
  EXPECT_EQ(*ReadFileToString(dir->PinnedPath("LATEST")), "ckpt-1\n");
  // A link placed where a sub-directory is made is not followed.
  ASSERT_EQ(::symlink(outside_.Sub("data").c_str(), root_.Sub("data.old/ckpt/evil").c_str()), 0);
  EXPECT_EQ(dir->SubDir("evil", true).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(ConfinedFileTest, LinksThatStayUnderTheRootsStillWork) {
  ASSERT_EQ(::symlink(root_.Sub("data").c_str(), root_.Sub("alias").c_str()), 0);
  auto read = ReadNpyAsFloat32(root_.Sub("alias/f.npy"), nullptr, &roots_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ((*read)[0], 1);
  const float c[2] = {3, 4};
  ASSERT_TRUE(WriteNpy(root_.Sub("alias/c.npy"), NpyDtype::kFloat32, {2}, c, &roots_).ok());
  EXPECT_TRUE(PathExists(root_.Sub("data/c.npy")));
  ASSERT_TRUE(MakeConfinedDirs(root_.Sub("alias/a/b"), "field", &roots_).ok());
  EXPECT_TRUE(IsDirectory(root_.Sub("data/a/b")));
  // A link into a second root is inside too.
  TempDir second;
  auto two = DataRoots::Make({root_.path(), second.path()});
  ASSERT_TRUE(two.ok());
  ASSERT_TRUE(WriteFileAtomically(second.Sub("k.txt"), std::string("keys")).ok());
  ASSERT_EQ(::symlink(second.Sub("k.txt").c_str(), root_.Sub("k.txt").c_str()), 0);
  auto keys = ReadConfinedFile(root_.Sub("k.txt"), "keys", &*two);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(*keys, "keys");
  // A missing file under the roots is NOT_FOUND, as before.
  EXPECT_EQ(OpenConfinedRead(root_.Sub("data/none.npy"), "f", &roots_).status().code(),
            StatusCode::kNotFound);
}

// Before: Confine took the realpath of the longest existing prefix, so a dangling link to a
// missing path outside passed (and then failed NOT_FOUND), while a link to an existing path
// outside was refused: an oracle for what exists outside. Now both are refused alike.
TEST_F(ConfinedFileTest, ADanglingLinkIsRefusedLikeALinkToAnExistingFileOutside) {
  const std::string to_file = root_.Sub("to-file"), dangling = root_.Sub("dangling");
  ASSERT_EQ(::symlink(outside_.Sub("data/f.npy").c_str(), to_file.c_str()), 0);
  ASSERT_EQ(::symlink(outside_.Sub("data/none.npy").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(Refusal(roots_.Confine(dangling, "f").status(), dangling),
            Refusal(roots_.Confine(to_file, "f").status(), to_file));
  const std::string below = root_.Sub("dangling/x.npy");
  EXPECT_EQ(roots_.Confine(below, "f").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Refusal(OpenConfinedRead(dangling, "f", &roots_).status(), dangling),
            Refusal(OpenConfinedRead(to_file, "f", &roots_).status(), to_file));
}

TEST_F(ConfinedFileTest, WithoutRootsEverythingOpensAsBefore) {
  ASSERT_EQ(ProcessDataRoots(), nullptr);
  auto read = ReadConfinedFile(outside_.Sub("data/f.npy"));
  EXPECT_TRUE(read.ok());
  EXPECT_EQ(ReadConfinedFile(outside_.Sub("none")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MakeConfinedDirs(outside_.Sub("data/sub")).ok());
  EXPECT_EQ(MakeConfinedDirs(outside_.Sub("data/f.npy/x")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadConfinedFile(outside_.Sub("data")).status().code(),
            StatusCode::kInvalidArgument);  // EISDIR
  EXPECT_EQ(MakeConfinedDirs(outside_.Sub("data/f.npy")).code(), StatusCode::kFailedPrecondition);
}

// Private folders: the services' own state under a data root is never
// read or written for a caller; the deepest folder decides, so a root inside a private folder
// (local up's output folders inside its state folder) is open again.
TEST(DataRootsPrivate, TheDeepestFolderDecides) {
  TempDir top;
  ASSERT_TRUE(MakeDirs(top.Sub("state/db")).ok());
  ASSERT_TRUE(MakeDirs(top.Sub("state/coordinator/jobs")).ok());
  ASSERT_TRUE(WriteFileAtomically(top.Sub("state/db/CURRENT"), "MANIFEST-000001\n").ok());
  auto roots = DataRoots::Make({top.path(), top.Sub("state/coordinator/jobs")}, {top.Sub("state")});
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  // Under the root and outside the private folder: open.
  EXPECT_TRUE(roots->Confine(top.Sub("data/x.npy"), "f").ok());
  // Inside the private folder: refused, existing or not, as PERMISSION_DENIED naming it.
  for (const std::string& path : {top.Sub("state/db/CURRENT"), top.Sub("state/tls/ca.pem"),
                                  top.Sub("state"), top.Sub("state/coordinator/db/x")}) {
    auto r = roots->Confine(path, "centroids_out");
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << path;
    EXPECT_NE(r.status().message().find("private"), std::string::npos) << r.status().ToString();
  }
  // A root deeper inside the private folder is open again.
  EXPECT_TRUE(roots->Confine(top.Sub("state/coordinator/jobs/j1/r0/c.npy"), "f").ok());
  // A link from an open folder into the private one is refused like the path itself.
  ASSERT_EQ(::symlink(top.Sub("state/db").c_str(), top.Sub("data-link").c_str()), 0);
  EXPECT_FALSE(roots->Confine(top.Sub("data-link/CURRENT"), "f").ok());
  EXPECT_FALSE(roots->CheckListedEntry(top.Sub("data-link"), "f").ok());
}

TEST(DataRootsPrivate, APrivateFolderThatIsARootStaysPrivate) {
  TempDir top;
  auto roots = DataRoots::Make({top.path()}, {top.path()});
  ASSERT_TRUE(roots.ok());
  EXPECT_FALSE(roots->Confine(top.Sub("x"), "f").ok());
  // A private folder made later (the database of a service started afterwards) is private
  // from the start; relative private folders are taken from the working directory.
  auto later = DataRoots::Make({top.path()}, {top.Sub("not/yet")});
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(later->Confine(top.Sub("not/yet/CURRENT"), "f").ok());
  EXPECT_TRUE(later->Confine(top.Sub("not/other"), "f").ok());
  EXPECT_EQ(OwnStateDirs("/d", {"db"}), (std::vector<std::string>{"/d/tls-private", "/d/db"}));
  EXPECT_TRUE(OwnStateDirs("").empty());
}

}  // namespace
}  // namespace mlcd
