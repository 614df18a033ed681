#include "agent/binary_cache.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/files.h"
#include "gtest/gtest.h"

namespace shoal::agent {
namespace {

// The head's blob store, in memory. Calls may be answered at once or held
// until Flush() (as a real head answers later, on the loop).
class FakeHead {
 public:
  void Put(const std::string& hash, std::string data) {
    blobs_[hash] = std::move(data);
  }

  ChunkFetcher Fetcher() {
    return [this](const std::string& hash, int64_t offset, int64_t max_bytes,
                  std::function<void(absl::StatusOr<BinaryChunk>)> done) {
      ++calls_;
      auto answer = [this, hash, offset, max_bytes, done] {
        auto it = blobs_.find(hash);
        if (it == blobs_.end() || fail_) {
          return done(absl::NotFoundError("no blob " + hash));
        }
        BinaryChunk chunk;
        chunk.data = it->second.substr(offset, max_bytes);
        chunk.last =
            offset + max_bytes >= static_cast<int64_t>(it->second.size());
        done(chunk);
      };
      if (hold_) {
        held_.push_back(answer);
      } else {
        answer();
      }
    };
  }

  void Flush() {
    while (!held_.empty()) {
      auto next = held_.front();
      held_.erase(held_.begin());
      next();
    }
  }

  int calls_ = 0;
  bool hold_ = false;
  bool fail_ = false;

 private:
  std::map<std::string, std::string> blobs_;
  std::vector<std::function<void()>> held_;
};

class BinaryCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/shoal_binary_cache_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ASSERT_TRUE(MakeDirs(dir_ + "/cache").ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `contents` to dir_/name; its hash.
  std::string Write(const std::string& name, const std::string& contents) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFile(path, contents, 0755).ok());
    return *Sha256File(path);
  }

  absl::StatusOr<std::string> Resolve(BinaryCache& cache,
                                      const std::string& path,
                                      const std::string& hash,
                                      const std::string& blob_hash = "") {
    absl::StatusOr<std::string> result = absl::UnknownError("not called");
    cache.Resolve(path, hash, blob_hash,
                  [&](absl::StatusOr<std::string> r) { result = r; });
    return result;
  }

  std::string dir_;
  FakeHead head_;
};

TEST_F(BinaryCacheTest, TheDriversOwnFileWhenItHasTheHash) {
  std::string hash = Write("driver", "binary v1");
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  EXPECT_EQ(Resolve(cache, dir_ + "/driver", hash).value(), dir_ + "/driver");
  EXPECT_EQ(Resolve(cache, dir_ + "/driver", "").value(), dir_ + "/driver");
  EXPECT_EQ(head_.calls_, 0);
}

TEST_F(BinaryCacheTest, FetchesInChunksWhenTheFileIsElsewhere) {
  std::string contents(10000, 'x');
  contents += "the end";
  std::string hash = Write("original", contents);
  head_.Put(hash, contents);
  BinaryCache cache(dir_ + "/cache", head_.Fetcher(), /*chunk_bytes=*/4096);
  absl::StatusOr<std::string> path = Resolve(cache, "/nowhere/binary", hash);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/cache/" + hash);
  EXPECT_EQ(head_.calls_, 3);
  EXPECT_EQ(*ReadFile(*path), contents);
  struct stat st;
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);
  // The cached copy serves the next lease without a fetch.
  EXPECT_EQ(Resolve(cache, "/nowhere/binary", hash).value(), *path);
  EXPECT_EQ(head_.calls_, 3);
}

TEST_F(BinaryCacheTest, AChangedDriverFileIsNotUsed) {
  std::string hash = Write("driver", "binary v1");
  head_.Put(hash, "binary v1");
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  ASSERT_TRUE(Resolve(cache, dir_ + "/driver", hash).ok());
  Write("driver", "binary v2, rebuilt");
  EXPECT_EQ(Resolve(cache, dir_ + "/driver", hash).value(),
            dir_ + "/cache/" + hash);
}

TEST_F(BinaryCacheTest, ConcurrentRequestsShareOneFetch) {
  std::string hash = Write("original", "shared binary");
  head_.Put(hash, "shared binary");
  head_.hold_ = true;
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  std::vector<absl::StatusOr<std::string>> results;
  for (int i = 0; i < 3; ++i) {
    cache.Resolve("/nowhere", hash, "",
                  [&](absl::StatusOr<std::string> r) { results.push_back(r); });
  }
  EXPECT_TRUE(results.empty());
  head_.Flush();
  EXPECT_EQ(head_.calls_, 1);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) EXPECT_EQ(r.value(), dir_ + "/cache/" + hash);
}

TEST_F(BinaryCacheTest, AFailedFetchSaysSoToEveryWaiter) {
  head_.fail_ = true;
  head_.hold_ = true;
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  std::vector<absl::Status> results;
  for (int i = 0; i < 2; ++i) {
    cache.Resolve("/nowhere", "abc", "", [&](absl::StatusOr<std::string> r) {
      results.push_back(r.status());
    });
  }
  head_.Flush();
  ASSERT_EQ(results.size(), 2u);
  for (const auto& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE(absl::StrContains(s.message(), "the head has no copy"))
        << s.message();
    EXPECT_TRUE(absl::StrContains(s.message(), "start the driver again"))
        << s.message();
  }
  // A later request tries again.
  head_.fail_ = false;
  head_.hold_ = false;
  std::string hash = Write("original", "now there");
  head_.Put(hash, "now there");
  EXPECT_TRUE(Resolve(cache, "/nowhere", hash).ok());
}

// The head holds a copy with its debug info stripped, under a hash of its
// own: a node that sees the driver's file uses it in place, one that does
// not fetches the copy by the copy's hash.
TEST_F(BinaryCacheTest, TheHeadsStrippedCopyIsFetchedByItsOwnHash) {
  std::string hash = Write("driver", "binary with debug info");
  std::string blob = Write("stripped", "binary");
  head_.Put(blob, "binary");
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  EXPECT_EQ(Resolve(cache, dir_ + "/driver", hash, blob).value(),
            dir_ + "/driver");
  EXPECT_EQ(head_.calls_, 0);
  absl::StatusOr<std::string> path = Resolve(cache, "/nowhere", hash, blob);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/cache/" + blob);
  EXPECT_EQ(*ReadFile(*path), "binary");
  // Cached: not fetched again.
  int calls = head_.calls_;
  EXPECT_EQ(Resolve(cache, "/nowhere", hash, blob).value(), *path);
  EXPECT_EQ(head_.calls_, calls);
}

TEST_F(BinaryCacheTest, WhatDoesNotMatchTheHashIsDataLoss) {
  std::string hash = Write("original", "the real binary");
  head_.Put(hash, "something else");
  BinaryCache cache(dir_ + "/cache", head_.Fetcher());
  absl::StatusOr<std::string> path = Resolve(cache, "/nowhere", hash);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(PathExists(dir_ + "/cache/" + hash));
  EXPECT_FALSE(PathExists(dir_ + "/cache/" + hash + ".partial"));
}

}  // namespace
}  // namespace shoal::agent
