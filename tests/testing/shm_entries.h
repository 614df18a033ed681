// The names in /dev/shm (object store arenas, shared-memory segments), for
// tests that check what a run left behind.
#ifndef SHOAL_TESTS_TESTING_SHM_ENTRIES_H_
#define SHOAL_TESTS_TESTING_SHM_ENTRIES_H_

#include <set>
#include <string>

namespace shoal::testing {

std::set<std::string> ShmEntries();

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_SHM_ENTRIES_H_
