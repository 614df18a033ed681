// Finds the worker binary a lease names on this node: the driver's own path
// when the file there has the expected hash (the driver runs on a host whose
// files this node sees: nothing was copied), else a copy in the cache
// directory, fetched from the head chunk by chunk when missing. The head's
// copy may be another file than the driver's (its debug info stripped),
// with a hash of its own. Concurrent requests for one copy share one fetch.
//
// The head is behind a seam (ChunkFetcher), so that tests fetch from memory.
//
// Threading: lives on the agent's event loop; not thread-safe. The fetcher
// must call its callback on the same loop (at once or later).
#ifndef SHOAL_AGENT_BINARY_CACHE_H_
#define SHOAL_AGENT_BINARY_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::agent {

struct BinaryChunk {
  std::string data;
  bool last = false;  // the file ends with this chunk
};

// Fetches up to `max_bytes` of the blob with `hash` from `offset`.
using ChunkFetcher = std::function<void(
    const std::string& hash, int64_t offset, int64_t max_bytes,
    std::function<void(absl::StatusOr<BinaryChunk>)> done)>;

class BinaryCache {
 public:
  using Done = std::function<void(absl::StatusOr<std::string> path)>;

  // `dir` (which must exist) holds fetched binaries, named by hash.
  BinaryCache(std::string dir, ChunkFetcher fetch,
              int64_t chunk_bytes = 4 << 20);

  // Calls `done` with the path of the binary: `path` itself when its
  // SHA-256 is `hash` (or when `hash` is empty: nothing to check), else the
  // cached copy of the head's blob `blob_hash` (`hash` when empty), fetched
  // first if need be. Errors: the fetch failed (annotated; NotFound names
  // what to do), or DataLoss when what arrived does not match the hash.
  // `done` may run before Resolve returns.
  void Resolve(const std::string& path, const std::string& hash,
               const std::string& blob_hash, Done done);

  // True when the file at `path` exists and its SHA-256 is `hash`. Hashes
  // are remembered per path, size and modification time.
  bool FileHasHash(const std::string& path, const std::string& hash);

 private:
  void FetchChunk(const std::string& hash, const std::string& partial,
                  const std::string& final_path, int64_t offset);
  void Finish(const std::string& hash, const absl::StatusOr<std::string>& r);

  const std::string dir_;
  const ChunkFetcher fetch_;
  const int64_t chunk_bytes_;
  std::map<std::string, std::string> hash_cache_;     // path|size|mtime -> hash
  std::map<std::string, std::vector<Done>> waiters_;  // hash -> fetch waiters
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_BINARY_CACHE_H_
