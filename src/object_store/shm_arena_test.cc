#include "object_store/shm_arena.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::object_store {
namespace {

using ::testing::HasSubstr;

std::string UniqueName(const char* what) {
  static int counter = 0;
  return absl::StrCat("test-", what, "-", getpid(), "-", counter++);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(ShmArenaTest, CreateOpenShareAndUnlink) {
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<ShmArena>> arena =
        ShmArena::Create(UniqueName("share"), 1 << 20);
    ASSERT_TRUE(arena.ok()) << arena.status();
    path = (*arena)->path();
    EXPECT_EQ(path.rfind("/dev/shm/shoal-", 0), 0u) << path;
    EXPECT_FALSE((*arena)->on_fallback());
    EXPECT_EQ((*arena)->capacity(), 1u << 20);

    absl::StatusOr<std::unique_ptr<ShmArena>> client = ShmArena::Open(path);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->capacity(), 1u << 20);
    std::memcpy((*arena)->data() + 4096, "hello", 5);
    EXPECT_EQ(std::memcmp((*client)->data() + 4096, "hello", 5), 0);
    (*client)->data()[100] = 7;
    EXPECT_EQ((*arena)->data()[100], 7);

    // A client going away leaves the file.
    client->reset();
    EXPECT_TRUE(Exists(path));
  }
  EXPECT_FALSE(Exists(path)) << "the creator removes the file";
}

TEST(ShmArenaTest, OpenByName) {
  std::string name = UniqueName("byname");
  auto arena = ShmArena::Create(name, 4096);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto client = ShmArena::Open(name);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->path(), (*arena)->path());
}

TEST(ShmArenaTest, CreateTwiceIsAlreadyExists) {
  std::string name = UniqueName("twice");
  auto first = ShmArena::Create(name, 4096);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ShmArena::Create(name, 4096);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.status().message(), HasSubstr("already exists"));
}

TEST(ShmArenaTest, BadArguments) {
  EXPECT_EQ(ShmArena::Create("a/b", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::Create("", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::Create(UniqueName("zero"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status missing = ShmArena::Open(UniqueName("missing")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("agent"));
}

TEST(ShmArenaTest, FallsBackWhenShmIsShort) {
  char dir_template[] = "/tmp/shoal-arena-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  ShmArenaOptions options;
  options.fallback_dir = dir;
  options.free_space = [](const std::string& d) -> absl::StatusOr<uint64_t> {
    if (d == "/dev/shm") return uint64_t{1} << 20;  // Too little.
    return FreeSpace(d);
  };
  {
    auto arena = ShmArena::Create(UniqueName("fallback"), 8 << 20, options);
    ASSERT_TRUE(arena.ok()) << arena.status();
    EXPECT_TRUE((*arena)->on_fallback());
    EXPECT_EQ((*arena)->path().rfind(dir + "/shoal-", 0), 0u);
    EXPECT_THAT((*arena)->backing_note(), HasSubstr("/dev/shm has only"));
    EXPECT_THAT((*arena)->backing_note(), HasSubstr(dir));
    (*arena)->data()[(8 << 20) - 1] = 1;  // The whole range is mapped.
    auto client = ShmArena::Open((*arena)->path());
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->data()[(8 << 20) - 1], 1);
  }
  // Without a fallback it is an error naming the fix.
  options.fallback_dir.clear();
  auto refused = ShmArena::Create(UniqueName("nofallback"), 8 << 20, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--shm-size"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("smaller --object-store-memory"));
  rmdir(dir.c_str());
}

TEST(DefaultCapacityTest, FollowsRaysRule) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  // 30% of memory when /dev/shm is large.
  EXPECT_EQ(DefaultCapacity(100 * kGiB, 100 * kGiB), 100 * kGiB / 10 * 3);
  // 90% of /dev/shm when that is smaller.
  EXPECT_EQ(DefaultCapacity(100 * kGiB, 10 * kGiB), 10 * kGiB / 10 * 9);
  // Never below 64 MiB.
  EXPECT_EQ(DefaultCapacity(100 * kGiB, 10 * kMiB), 64 * kMiB);
  EXPECT_EQ(DefaultCapacity(100 * kMiB, 100 * kGiB), 64 * kMiB);
  EXPECT_GE(DefaultCapacity(), 64 * kMiB);
}

}  // namespace
}  // namespace shoal::object_store
