// A Store in a directory of files, for ranks that are processes of one host
// without a cluster (tests and benchmarks fork them).
#ifndef SHOAL_COLLECTIVE_FILE_STORE_H_
#define SHOAL_COLLECTIVE_FILE_STORE_H_

#include <memory>
#include <string>

#include "shoal/collective.h"

namespace shoal::collective::internal {

// Keys become file names under `directory` (which must exist); values are
// written atomically. Threading: thread-safe; usable from several processes.
std::shared_ptr<Store> FileStore(const std::string& directory);

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_FILE_STORE_H_
