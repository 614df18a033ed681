#include "agent/binary_cache.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace shoal::agent {

BinaryCache::BinaryCache(std::string dir, ChunkFetcher fetch,
                         int64_t chunk_bytes)
    : dir_(std::move(dir)),
      fetch_(std::move(fetch)),
      chunk_bytes_(chunk_bytes) {}

void BinaryCache::Resolve(const std::string& path, const std::string& hash,
                          const std::string& blob_hash, Done done) {
  if (hash.empty()) return done(path);
  if (FileHasHash(path, hash)) return done(path);
  const std::string& blob = blob_hash.empty() ? hash : blob_hash;
  std::string cached = dir_ + "/" + blob;
  if (FileHasHash(cached, blob)) return done(cached);
  std::vector<Done>& waiters = waiters_[blob];
  waiters.push_back(std::move(done));
  if (waiters.size() > 1) return;  // already fetching
  SHOAL_LOG(INFO) << "fetching binary " << blob.substr(0, 12)
                  << " from the head (" << path << " is not here)";
  std::string partial = cached + ".partial";
  unlink(partial.c_str());
  FetchChunk(blob, partial, cached, 0);
}

void BinaryCache::FetchChunk(const std::string& hash,
                             const std::string& partial,
                             const std::string& final_path, int64_t offset) {
  fetch_(
      hash, offset, chunk_bytes_,
      [this, hash, partial, final_path,
       offset](absl::StatusOr<BinaryChunk> chunk) {
        if (absl::IsNotFound(chunk.status())) {
          // The driver sends its program to the head when it starts with
          // nodes of other hosts in the cluster, or when a lease first
          // fails for want of it (RequestLeaseReply.needs_program).
          return Finish(
              hash,
              absl::NotFoundError(
                  "the driver's program is not on this host and the head "
                  "has no copy of it yet (a driver sends one when its tasks "
                  "first need it on another host); if this persists (an "
                  "actor made before this node joined, or a head that lost "
                  "its copies), start the driver again"));
        }
        if (!chunk.ok()) {
          return Finish(hash, Annotate(chunk.status(),
                                       "cannot fetch the worker binary "
                                       "from the head"));
        }
        {
          std::ofstream f(partial, std::ios::binary | std::ios::app);
          f.write(chunk->data.data(),
                  static_cast<std::streamsize>(chunk->data.size()));
        }
        if (!chunk->last) {
          return FetchChunk(hash, partial, final_path,
                            offset + static_cast<int64_t>(chunk->data.size()));
        }
        auto got = Sha256File(partial);
        if (!got.ok() || *got != hash) {
          unlink(partial.c_str());
          return Finish(
              hash, absl::DataLossError("the binary fetched from the head does "
                                        "not match its hash"));
        }
        // Run by this node's workers, its user's alone (as the session
        // folder it lies in).
        chmod(partial.c_str(), 0700);
        rename(partial.c_str(), final_path.c_str());
        Finish(hash, final_path);
      });
}

void BinaryCache::Finish(const std::string& hash,
                         const absl::StatusOr<std::string>& result) {
  auto it = waiters_.find(hash);
  if (it == waiters_.end()) return;
  std::vector<Done> waiters = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : waiters) w(result);
}

bool BinaryCache::FileHasHash(const std::string& path,
                              const std::string& hash) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  std::string key = absl::StrCat(path, "|", st.st_size, "|", st.st_mtim.tv_sec,
                                 ".", st.st_mtim.tv_nsec);
  auto it = hash_cache_.find(key);
  if (it == hash_cache_.end()) {
    auto h = Sha256File(path);
    if (!h.ok()) return false;
    it = hash_cache_.emplace(key, *h).first;
  }
  return it->second == hash;
}

}  // namespace shoal::agent
