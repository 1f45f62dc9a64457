// The fuzz targets in the ordinary build: runs LLVMFuzzerTestOneInput over every file of the
// directories given (the target's seed corpus and the regression inputs of crashes found), so
// each CTest run replays them with gcc (and, in the sanitizer build, ASan + UBSan) without
// clang's libFuzzer. Exit 1 when a directory is missing or empty.
//   fuzz_replay_<target> [--signals] DIR...
// --signals replays every input a second time under a SIGALRM every 100 us whose handler
// does nothing and is installed without SA_RESTART, as libFuzzer's -timeout timer is (every
// timeout/2 + 1 s): a target whose blocking calls do not retry EINTR fails here as it would
// in a fuzz run (fuzz_metrics_http's keep-open client did, after 6 s of fuzzing).
#include <dirent.h>
#include <signal.h>
#include <sys/time.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr suseconds_t kSignalPeriodUs = 100;

void IgnoreAlarm(int) {}

// A no-op SIGALRM every `period_us` (0: the timer stops; the handler stays, so that a
// signal still pending cannot end the process).
void AlarmEvery(suseconds_t period_us) {
  struct sigaction action {};
  action.sa_handler = IgnoreAlarm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART, as libFuzzer's
  sigaction(SIGALRM, &action, nullptr);
  itimerval timer{};
  timer.it_interval.tv_usec = period_us;
  timer.it_value.tv_usec = period_us;
  setitimer(ITIMER_REAL, &timer, nullptr);
}

// Runs every file of `dirs` through the target; -1 when a directory is missing.
int ReplayAll(const std::vector<std::string>& dirs) {
  int replayed = 0;
  for (const std::string& path : dirs) {
    DIR* dir = opendir(path.c_str());
    if (!dir) {
      std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
      return -1;
    }
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || name[0] == '.') continue;
      std::ifstream in(path + "/" + name, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++replayed;
    }
    closedir(dir);
  }
  return replayed;
}

}  // namespace

int main(int argc, char** argv) {
  bool signals = false;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--signals") {
      signals = true;
    } else {
      dirs.emplace_back(argv[i]);
    }
  }
  const int replayed = ReplayAll(dirs);
  if (replayed <= 0) return 1;
  std::printf("replayed %d inputs\n", replayed);
  if (signals) {
    AlarmEvery(kSignalPeriodUs);
    const int again = ReplayAll(dirs);
    AlarmEvery(0);
    std::printf("replayed %d inputs under SIGALRM every %ld us\n", again,
                static_cast<long>(kSignalPeriodUs));
  }
  return 0;
}
