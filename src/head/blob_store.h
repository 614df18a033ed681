// The program copies the head keeps (HAS_BLOB, PUT_BLOB_CHUNK,
// GET_BLOB_CHUNK): a driver uploads its binary once, named by the hex
// SHA-256 of its contents, and agents on other hosts fetch it from here to
// start the driver's workers. Files under `dir` (the session's blobs/), one
// per blob; an upload in progress is a partial file per uploader, renamed
// into place once its last chunk arrives and its hash matches.
//
// Threading: lives on the head's event loop; not thread-safe.
#ifndef SHOAL_HEAD_BLOB_STORE_H_
#define SHOAL_HEAD_BLOB_STORE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class BlobStore {
 public:
  // The most a GET_BLOB_CHUNK answer carries, whatever it asks for.
  static constexpr int64_t kMaxChunk = 4 << 20;

  explicit BlobStore(std::string dir) : dir_(std::move(dir)) {}

  // 64 lowercase hex digits.
  static bool ValidHash(const std::string& hash);

  proto::HasBlobReply Has(const proto::BlobRef& ref) const;
  // Writes one chunk of an upload by `uploader` (uploads by others go on
  // beside it). On the last chunk the blob is checked against its hash
  // (DataLoss, the upload dropped, when it does not match) and kept;
  // unfinished uploads of it by others are dropped then. A chunk of a blob
  // already kept is taken and ignored.
  absl::Status PutChunk(const proto::BlobChunk& chunk, uint64_t uploader);
  // Up to min(max_bytes, kMaxChunk) bytes (kMaxChunk when max_bytes <= 0)
  // from `offset` (past the end: none, and `last`).
  absl::StatusOr<proto::BlobChunk> GetChunk(
      const proto::GetBlobChunkRequest& request) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(const std::string& hash) const;

  const std::string dir_;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_BLOB_STORE_H_
