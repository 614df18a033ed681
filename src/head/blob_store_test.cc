#include "head/blob_store.h"

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/blobsXXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static proto::BlobChunk Chunk(const std::string& hash, int64_t offset,
                                const std::string& data, bool last) {
    proto::BlobChunk c;
    c.set_hash(hash);
    c.set_offset(offset);
    c.set_data(data);
    c.set_last(last);
    return c;
  }
  static proto::GetBlobChunkRequest Read(const std::string& hash,
                                         int64_t offset, int64_t max_bytes) {
    proto::GetBlobChunkRequest r;
    r.set_hash(hash);
    r.set_offset(offset);
    r.set_max_bytes(max_bytes);
    return r;
  }
  static proto::BlobRef Ref(const std::string& hash) {
    proto::BlobRef r;
    r.set_hash(hash);
    return r;
  }
  size_t Files() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      (void)e;
      ++n;
    }
    return n;
  }

  std::string dir_;
};

TEST_F(BlobStoreTest, AnUploadInChunksIsKeptAndReadBack) {
  BlobStore blobs(dir_);
  const std::string data = "hello, program bytes";
  const std::string hash = Sha256Hex(data);
  EXPECT_FALSE(blobs.Has(Ref(hash)).present());
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 0, data.substr(0, 7), false), 1).ok());
  EXPECT_FALSE(blobs.Has(Ref(hash)).present());
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 7, data.substr(7), true), 1).ok());
  proto::HasBlobReply has = blobs.Has(Ref(hash));
  EXPECT_TRUE(has.present());
  EXPECT_EQ(has.size(), static_cast<int64_t>(data.size()));
  EXPECT_EQ(Files(), 1u);  // no partial file left

  absl::StatusOr<proto::BlobChunk> head = blobs.GetChunk(Read(hash, 0, 5));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->data(), "hello");
  EXPECT_FALSE(head->last());
  EXPECT_EQ(head->total_size(), static_cast<int64_t>(data.size()));
  absl::StatusOr<proto::BlobChunk> rest = blobs.GetChunk(Read(hash, 5, 0));
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->data(), data.substr(5));
  EXPECT_TRUE(rest->last());
  absl::StatusOr<proto::BlobChunk> past = blobs.GetChunk(Read(hash, 999, 0));
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data(), "");
  EXPECT_EQ(past->offset(), static_cast<int64_t>(data.size()));
  EXPECT_TRUE(past->last());
}

TEST_F(BlobStoreTest, AnUploadThatDoesNotMatchItsHashIsDropped) {
  BlobStore blobs(dir_);
  const std::string hash = Sha256Hex("what was promised");
  absl::Status st = blobs.PutChunk(Chunk(hash, 0, "something else", true), 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(st.message()).find("upload it again"),
            std::string::npos);
  EXPECT_FALSE(blobs.Has(Ref(hash)).present());
  EXPECT_EQ(Files(), 0u);
}

TEST_F(BlobStoreTest, NamesThatAreNotHashesAreRefused) {
  BlobStore blobs(dir_);
  for (const std::string& bad :
       {std::string(""), std::string("../../etc/passwd"), std::string(64, 'A'),
        std::string(63, 'a')}) {
    EXPECT_EQ(blobs.PutChunk(Chunk(bad, 0, "x", true), 1).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(blobs.GetChunk(Read(bad, 0, 0)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(blobs.Has(Ref(bad)).present());
  }
  EXPECT_TRUE(BlobStore::ValidHash(std::string(64, 'f')));
}

TEST_F(BlobStoreTest, AMissingBlobSaysHowToGetItBack) {
  BlobStore blobs(dir_);
  absl::StatusOr<proto::BlobChunk> got =
      blobs.GetChunk(Read(std::string(64, '0'), 0, 0));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(got.status().message()).find("connect again"),
            std::string::npos);
}

TEST_F(BlobStoreTest, AnswersAreAtMostTheChunkLimit) {
  BlobStore blobs(dir_);
  const std::string data(BlobStore::kMaxChunk + 10, 'z');
  const std::string hash = Sha256Hex(data);
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 0, data, true), 1).ok());
  for (int64_t asked : {int64_t{0}, int64_t{-1}, BlobStore::kMaxChunk * 4}) {
    absl::StatusOr<proto::BlobChunk> got = blobs.GetChunk(Read(hash, 0, asked));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(static_cast<int64_t>(got->data().size()), BlobStore::kMaxChunk)
        << asked;
    EXPECT_FALSE(got->last());
  }
  absl::StatusOr<proto::BlobChunk> tail =
      blobs.GetChunk(Read(hash, BlobStore::kMaxChunk, 0));
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data().size(), 10u);
  EXPECT_TRUE(tail->last());
}

TEST_F(BlobStoreTest, UploadsByTwoDriversDoNotStepOnEachOther) {
  BlobStore blobs(dir_);
  const std::string data = "0123456789";
  const std::string hash = Sha256Hex(data);
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 0, "01234", false), 1).ok());
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 0, "012", false), 2).ok());
  ASSERT_TRUE(blobs.PutChunk(Chunk(hash, 3, "3456789", true), 2).ok());
  // The first uploader's partial copy went with the finished upload.
  EXPECT_EQ(Files(), 1u);
  // What it still sends is taken and not needed.
  EXPECT_TRUE(blobs.PutChunk(Chunk(hash, 5, "XXXXX", true), 1).ok());
  EXPECT_EQ(Files(), 1u);
  absl::StatusOr<proto::BlobChunk> got = blobs.GetChunk(Read(hash, 0, 0));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->data(), data);
}

}  // namespace
}  // namespace shoal
