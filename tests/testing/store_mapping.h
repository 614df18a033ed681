// Whether bytes lie in this process's mapping of a node's object store: a
// Get that maps rather than copies returns such bytes.
#ifndef SHOAL_TESTS_TESTING_STORE_MAPPING_H_
#define SHOAL_TESTS_TESTING_STORE_MAPPING_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace shoal::testing {

// True when [p, p + size) lies in a mapping of a node store's arena.
inline bool InStoreMapping(const void* p, size_t size) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    if (line.find("shoal-node-") == std::string::npos) continue;
    uintptr_t lo = 0, hi = 0;
    if (sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr + size <= hi) return true;
  }
  return false;
}

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_STORE_MAPPING_H_
