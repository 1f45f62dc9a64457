// KeepFreedMemoryForReuse: a block of a few MiB comes from the heap instead of mmap, and
// stays in the process after free() (so the next step reuses it without page faults).
#include "common/malloc_env.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace mlcd {
namespace {

TEST(MallocEnvTest, FreedBlocksStayInTheProcess) {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      std::getenv("MLCD_NO_MALLOC_TUNING")) {
    // glibc already applied the user's settings at start-up: the call must leave them alone.
    EXPECT_FALSE(KeepFreedMemoryForReuse());
    return;
  }
  ASSERT_TRUE(KeepFreedMemoryForReuse());
  const size_t size = 24u << 20;  // above glibc's default 128 KiB..32 MiB adaptive range start
  const size_t mapped_before = mallinfo2().hblkhd;
  char* block = static_cast<char*>(std::malloc(size));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, size);
  // Not an mmapped block: the heap grew instead.
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before);
  std::free(block);
  // Still owned by the process as free heap memory (not trimmed back to the kernel).
  EXPECT_GE(mallinfo2().fordblks, size);
  // A block above 32 MiB is still mmapped, so one huge allocation does not pin memory.
  const size_t huge = 64u << 20;
  char* big = static_cast<char*>(std::malloc(huge));
  ASSERT_NE(big, nullptr);
  EXPECT_GE(mallinfo2().hblkhd, mapped_before + huge);
  std::free(big);
}

// The opt-out: with MLCD_NO_MALLOC_TUNING set the call changes nothing and says so.
TEST(MallocEnvTest, LeavesMallocAloneWhenTheUserOptsOut) {
  const char* before = std::getenv("MLCD_NO_MALLOC_TUNING");
  ::setenv("MLCD_NO_MALLOC_TUNING", "1", 1);
  EXPECT_FALSE(KeepFreedMemoryForReuse());
  if (before == nullptr) ::unsetenv("MLCD_NO_MALLOC_TUNING");
}

}  // namespace
}  // namespace mlcd
