#include "head/blob_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace shoal {

bool BlobStore::ValidHash(const std::string& hash) {
  if (hash.size() != 64) return false;
  for (char c : hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string BlobStore::PathOf(const std::string& hash) const {
  return dir_ + "/" + hash;
}

proto::HasBlobReply BlobStore::Has(const proto::BlobRef& ref) const {
  proto::HasBlobReply reply;
  struct stat st;
  if (ValidHash(ref.hash()) && stat(PathOf(ref.hash()).c_str(), &st) == 0) {
    reply.set_present(true);
    reply.set_size(st.st_size);
  }
  return reply;
}

absl::Status BlobStore::PutChunk(const proto::BlobChunk& r, uint64_t uploader) {
  if (!ValidHash(r.hash())) {
    return absl::InvalidArgumentError(
        "a blob is named by the hex SHA-256 of its contents");
  }
  const std::string final_path = PathOf(r.hash());
  // One partial file per uploader: drivers of one program may upload it
  // at once (after a takeover, say), and one that finishes first must
  // not leave the others writing into a file it renamed.
  const std::string partial = absl::StrCat(final_path, ".partial.", uploader);
  if (access(final_path.c_str(), F_OK) == 0) {
    // Another upload of it finished: what this one sends is not needed.
    if (r.last()) unlink(partial.c_str());
    return absl::OkStatus();
  }
  std::fstream f(partial, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) f.open(partial, std::ios::out | std::ios::binary);
  if (!f) return absl::InternalError("cannot write " + partial);
  f.seekp(r.offset());
  f.write(r.data().data(), r.data().size());
  f.close();
  if (!r.last()) return absl::OkStatus();
  auto hash = Sha256File(partial);
  if (!hash.ok() || *hash != r.hash()) {
    unlink(partial.c_str());
    return absl::DataLossError(
        "uploaded binary does not match its hash; upload it again");
  }
  rename(partial.c_str(), final_path.c_str());
  // Uploads of it that did not finish (their driver went away, or they
  // are still under way and will find it done) are not needed.
  std::error_code ec;
  const std::string prefix = r.hash() + ".partial.";
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    if (absl::StartsWith(e.path().filename().string(), prefix)) {
      std::filesystem::remove(e.path(), ec);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::BlobChunk> BlobStore::GetChunk(
    const proto::GetBlobChunkRequest& r) const {
  if (!ValidHash(r.hash())) return absl::InvalidArgumentError("bad blob hash");
  std::ifstream f(PathOf(r.hash()), std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(
        "the head has no binary with hash ", r.hash(),
        "; the driver that used it must connect again to upload it"));
  }
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  const int64_t want = std::min<int64_t>(
      r.max_bytes() > 0 ? r.max_bytes() : kMaxChunk, kMaxChunk);
  const int64_t offset = std::min<int64_t>(r.offset(), size);
  const int64_t n = std::min<int64_t>(want, size - offset);
  proto::BlobChunk chunk;
  chunk.set_hash(r.hash());
  chunk.set_offset(offset);
  chunk.set_total_size(size);
  std::string* data = chunk.mutable_data();
  data->resize(n);
  f.seekg(offset);
  f.read(data->data(), n);
  chunk.set_last(offset + n >= size);
  return chunk;
}

}  // namespace shoal
