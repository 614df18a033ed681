// Writes the seeds of every harness into <corpus dir>/<target>/<seed name>
// (replacing files of the same name; others are kept):
//   make_fuzz_corpus fuzz/corpus
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "fuzz/fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir, e.g. fuzz/corpus>\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  if (mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "cannot create %s: %s\n", root.c_str(),
                 std::strerror(errno));
    return 1;
  }
  for (const shoal::fuzz::Target& target : shoal::fuzz::kTargets) {
    const std::string dir = root + "/" + target.name;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "cannot create %s: %s\n", dir.c_str(),
                   std::strerror(errno));
      return 1;
    }
    int written = 0;
    for (const shoal::fuzz::Seed& seed : target.seeds()) {
      const std::string path = dir + "/" + seed.name;
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(seed.input.data(),
                static_cast<std::streamsize>(seed.input.size()));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      ++written;
    }
    std::printf("%s: %d seeds in %s\n", target.name, written, dir.c_str());
  }
  return 0;
}
