#include "tests/testing/shm_entries.h"

#include <filesystem>
#include <system_error>

namespace shoal::testing {

std::set<std::string> ShmEntries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

}  // namespace shoal::testing
