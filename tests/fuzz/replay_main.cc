// The fuzz targets in the ordinary build: runs LLVMFuzzerTestOneInput over every file of the
// directories given (the target's seed corpus and the regression inputs of crashes found), so
// each CTest run replays them with gcc (and, in the sanitizer build, ASan + UBSan) without
// clang's libFuzzer. Exit 1 when a directory is missing or empty.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    DIR* dir = opendir(argv[i]);
    if (!dir) {
      std::fprintf(stderr, "replay: cannot open %s\n", argv[i]);
      return 1;
    }
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || name[0] == '.') continue;
      std::ifstream in(std::string(argv[i]) + "/" + name, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++replayed;
    }
    closedir(dir);
  }
  std::printf("replayed %d inputs\n", replayed);
  return replayed > 0 ? 0 : 1;
}
