// WithheldFiles (common/withheld_files.h) with real processes: a child spawned with the
// ruleset cannot read a withheld file or anything in a withheld folder, and still reads its
// neighbours, files elsewhere, writes and renames files across folders, and runs programs.
#include "common/withheld_files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>

#include "common/file_util.h"
#include "common/subprocess.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

// `script` under /bin/sh in a child restricted by `withheld`: its exit code, its output in
// *out.
int RunRestricted(const WithheldFiles& withheld, const std::string& script, const std::string& log,
                  std::string* out) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.log_path = log;
  o.landlock_ruleset_fd = withheld.fd();
  auto pid = Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status().ToString();
  const int status = pid.ok() ? WaitForExit(*pid) : -1;
  auto text = ReadFileToString(log);
  *out = text.ok() ? *text : "";
  ::unlink(log.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class WithheldFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LandlockAbi() < kWithheldFilesMinLandlockAbi)
      GTEST_SKIP() << "this kernel offers Landlock ABI " << LandlockAbi();
    for (const auto& [name, text] :
         std::vector<std::pair<std::string, std::string>>{{"tls/service.key", "KEY"},
                                                          {"tls/service.pem", "CERT"},
                                                          {"private/copy.key", "COPY"},
                                                          {"data/a/image.txt", "IMAGE"}}) {
      ASSERT_TRUE(MakeDirs(dir_.Sub(name.substr(0, name.rfind('/')))).ok());
      ASSERT_TRUE(WriteFileAtomically(dir_.Sub(name), text).ok());
    }
    // A link to the key: reading through it reads the key.
    ASSERT_EQ(::symlink(dir_.Sub("tls/service.key").c_str(), dir_.Sub("data/key-link").c_str()), 0);
  }
  testing::TempDir dir_;
  testing::TempDir logs_;  // outside the folders the rules are made around
};

TEST_F(WithheldFilesTest, AChildCannotReadWhatIsWithheldAndDoesEverythingElse) {
  auto withheld = WithheldFiles::Build(
      {dir_.Sub("tls/service.key"), dir_.Sub("private"), dir_.Sub("tls/missing.key")});
  ASSERT_TRUE(withheld.ok()) << withheld.status().ToString();
  EXPECT_EQ(withheld->paths().size(), 2u);  // the missing one skipped
  EXPECT_GT(withheld->rules(), 0);
  const std::string log = logs_.Sub("child.log");
  std::string out;

  for (const std::string& secret :
       {dir_.Sub("tls/service.key"), dir_.Sub("private/copy.key"), dir_.Sub("data/key-link")}) {
    EXPECT_NE(RunRestricted(*withheld, "cat '" + secret + "'", log, &out), 0) << secret;
    EXPECT_NE(out.find("Permission denied"), std::string::npos) << secret << ": " << out;
  }
  // The certificate beside the key, data elsewhere, system files, programs.
  EXPECT_EQ(
      RunRestricted(*withheld,
                    "cat '" + dir_.Sub("tls/service.pem") + "' '" + dir_.Sub("data/a/image.txt") +
                        "' && head -c 1 /etc/passwd >/dev/null",
                    log, &out),
      0)
      << out;
  EXPECT_NE(out.find("CERTIMAGE"), std::string::npos) << out;
  // Writing, reading back, renaming into another folder, listing the withheld folder.
  const std::string script = "set -e; d='" + dir_.Sub("data") + "'; echo new > $d/a/new.txt; " +
                             "mkdir $d/b; mv $d/a/new.txt $d/b/moved.txt; cat $d/b/moved.txt; " +
                             "ls '" + dir_.Sub("private") + "'";
  EXPECT_EQ(RunRestricted(*withheld, script, log, &out), 0) << out;
  EXPECT_NE(out.find("new\ncopy.key"), std::string::npos) << out;
  // This process is not restricted.
  auto key = ReadFileToString(dir_.Sub("tls/service.key"));
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, "KEY");
}

TEST_F(WithheldFilesTest, ANewFileBesideAWithheldOneIsWithheldToo) {
  auto withheld = WithheldFiles::Build({dir_.Sub("tls/service.key")});
  ASSERT_TRUE(withheld.ok()) << withheld.status().ToString();
  // A renewed key written after the ruleset was made.
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("tls/renewed.key"), "NEW").ok());
  std::string out;
  EXPECT_NE(RunRestricted(*withheld, "cat '" + dir_.Sub("tls/renewed.key") + "'",
                          logs_.Sub("child.log"), &out),
            0);
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
}

TEST(WithheldFilesBuildTest, ARelativePathIsRefused) {
  if (LandlockAbi() < kWithheldFilesMinLandlockAbi) GTEST_SKIP() << "no Landlock";
  EXPECT_EQ(WithheldFiles::Build({"tls/key.pem"}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd
