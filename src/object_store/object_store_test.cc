#include "object_store/object_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::object_store {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;
constexpr ClientId kProducer = 1;
constexpr ClientId kReader = 2;

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The folder storage, with writes that fail on demand like a full disk.
class FlakySpillStorage : public SpillStorage {
 public:
  explicit FlakySpillStorage(std::unique_ptr<SpillStorage> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<std::string> Write(absl::string_view id, const uint8_t* data,
                                    uint64_t size) override {
    ++writes;
    if (fail_writes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("disk full: cannot spill ", id, " to ", Describe()));
    }
    return inner_->Write(id, data, size);
  }
  absl::Status Read(const std::string& location, uint8_t* dest,
                    uint64_t size) override {
    return inner_->Read(location, dest, size);
  }
  absl::Status Remove(const std::string& location) override {
    return inner_->Remove(location);
  }
  std::string Describe() const override { return inner_->Describe(); }

  bool fail_writes = false;
  int writes = 0;

 private:
  std::unique_ptr<SpillStorage> inner_;
};

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/shoal-spill-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    spill_dir_ = dir;
  }

  void TearDown() override {
    store_.reset();
    rmdir(spill_dir_.c_str());  // Fails (and the test notices) if not empty.
    EXPECT_FALSE(FileExists(spill_dir_)) << "spill files were left behind";
  }

  // A store of `capacity` bytes; `spill` false: no spill storage.
  void MakeStore(uint64_t capacity, bool spill = true) {
    static int counter = 0;
    auto arena = ShmArena::Create(
        absl::StrCat("store-test-", getpid(), "-", counter++), capacity);
    ASSERT_TRUE(arena.ok()) << arena.status();
    std::unique_ptr<SpillStorage> storage;
    if (spill) {
      auto folder = FolderSpillStorage::Create(spill_dir_);
      ASSERT_TRUE(folder.ok()) << folder.status();
      auto flaky = std::make_unique<FlakySpillStorage>(*std::move(folder));
      spill_ = flaky.get();
      storage = std::move(flaky);
    }
    ObjectStoreOptions options;
    options.on_evicted = [this](const ObjectId& id) { evicted_.push_back(id); };
    store_ = std::make_unique<ObjectStore>(*std::move(arena),
                                           std::move(storage), options);
  }

  uint8_t* At(const ObjectLocation& location) {
    return store_->arena().data() + location.offset;
  }

  // Bytes of object `id` derived from `seed`: data then metadata.
  static std::string Contents(const ObjectId& id, uint64_t size, int seed) {
    std::mt19937 rng(std::hash<std::string>()(id) + seed);
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    return bytes;
  }

  // Creates, fills and seals an object of `size` bytes (a quarter of them
  // metadata).
  void Put(const ObjectId& id, uint64_t size, CopyKind copy,
           ClientId client = kProducer) {
    uint64_t metadata = size / 4;
    auto location = store_->Create(id, size - metadata, metadata, client, copy,
                                   "owner-addr");
    ASSERT_TRUE(location.ok()) << location.status();
    std::string bytes = Contents(id, size, 0);
    std::memcpy(At(*location), bytes.data(), size);
    ASSERT_TRUE(store_->Seal(id, client).ok());
  }

  // Gets the object, checks its bytes are the ones Put wrote, releases it.
  void ExpectContents(const ObjectId& id) {
    auto location = store_->Get(id, kReader);
    ASSERT_TRUE(location.ok()) << location.status();
    std::string expected = Contents(id, location->size(), 0);
    EXPECT_EQ(std::memcmp(At(*location), expected.data(), expected.size()), 0)
        << "contents of " << id << " differ";
    ASSERT_TRUE(store_->Release(id, kReader).ok());
  }

  ObjectState StateOf(const ObjectId& id) {
    std::optional<ObjectInfo> info = store_->Lookup(id);
    EXPECT_TRUE(info.has_value()) << id;
    return info.has_value() ? info->state : ObjectState::kCreated;
  }

  std::string spill_dir_;
  FlakySpillStorage* spill_ = nullptr;
  std::unique_ptr<ObjectStore> store_;
  std::vector<ObjectId> evicted_;
};

TEST_F(ObjectStoreTest, CreateSealGetReleaseDelete) {
  MakeStore(64 * kKiB);
  auto created =
      store_->Create("a", 1000, 24, kProducer, CopyKind::kPrimary, "w1");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->offset % ArenaAllocator::kAlignment, 0u);
  EXPECT_EQ(created->size(), 1024u);
  EXPECT_TRUE(store_->Contains("a"));
  EXPECT_FALSE(store_->IsSealed("a"));
  EXPECT_EQ(store_->Get("a", kReader).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Stats().num_created, 1u);
  EXPECT_EQ(store_->Stats().creating_bytes, 1024u);

  std::memset(At(*created), 0x5a, 1024);
  ASSERT_TRUE(store_->Seal("a", kProducer).ok());
  EXPECT_TRUE(store_->IsSealed("a"));

  auto got = store_->Get("a", kReader);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->offset, created->offset);
  EXPECT_EQ(got->data_size, 1000u);
  EXPECT_EQ(got->metadata_size, 24u);
  EXPECT_EQ(At(*got)[1023], 0x5a);
  ASSERT_TRUE(store_->Get("a", kReader).ok());  // A second pin.
  ObjectInfo info = *store_->Lookup("a");
  EXPECT_EQ(info.pins, 2);
  EXPECT_EQ(info.owner, "w1");
  EXPECT_EQ(info.creator, kProducer);
  ObjectStoreStats pinned = store_->Stats();
  EXPECT_EQ(pinned.num_pinned, 1u);
  EXPECT_EQ(pinned.pinned_bytes, 1024u);
  EXPECT_EQ(pinned.num_sealed, 1u);

  ASSERT_TRUE(store_->Release("a", kReader).ok());
  ASSERT_TRUE(store_->Release("a", kReader).ok());
  EXPECT_EQ(store_->Stats().evictable_bytes, 1024u);
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_FALSE(store_->Contains("a"));
  ObjectStoreStats empty = store_->Stats();
  EXPECT_EQ(empty.used_bytes, 0u);
  EXPECT_EQ(empty.num_objects, 0u);
}

TEST_F(ObjectStoreTest, MisuseIsAnErrorWithAReason) {
  MakeStore(64 * kKiB);
  Put("a", 100, CopyKind::kPrimary);
  struct Case {
    const char* name;
    absl::Status status;
    absl::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"create twice",
       store_->Create("a", 1, 0, kProducer, CopyKind::kPrimary).status(),
       absl::StatusCode::kAlreadyExists, "already exists"},
      {"empty id", store_->Create("", 1, 0, 1, CopyKind::kPrimary).status(),
       absl::StatusCode::kInvalidArgument, "1 to 64 bytes"},
      {"long id",
       store_->Create(std::string(65, 'x'), 1, 0, 1, CopyKind::kPrimary)
           .status(),
       absl::StatusCode::kInvalidArgument, "not 65"},
      {"seal twice", store_->Seal("a", kProducer),
       absl::StatusCode::kFailedPrecondition, "already sealed"},
      {"seal unknown", store_->Seal("b", kProducer),
       absl::StatusCode::kNotFound, "never created"},
      {"abort sealed", store_->Abort("a", kProducer),
       absl::StatusCode::kFailedPrecondition, "deletes it instead"},
      {"get unknown", store_->Get("b", kReader).status(),
       absl::StatusCode::kNotFound, "not in this node's store"},
      {"release unpinned", store_->Release("a", kReader),
       absl::StatusCode::kFailedPrecondition, "holds no reference"},
      {"release unknown", store_->Release("b", kReader),
       absl::StatusCode::kNotFound, "not in the store"},
      {"delete unknown", store_->Delete("b"), absl::StatusCode::kNotFound,
       "not in the store"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.code) << c.name << ": " << c.status;
    EXPECT_THAT(c.status.message(), HasSubstr(c.says)) << c.name;
  }

  // Only the producer seals or aborts what it is writing.
  ASSERT_TRUE(store_->Create("c", 10, 0, kProducer, CopyKind::kPrimary).ok());
  absl::Status other = store_->Seal("c", kReader);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("being created by client 1"));
  EXPECT_EQ(store_->Abort("c", kReader).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->Abort("c", kProducer).ok());
  EXPECT_FALSE(store_->Contains("c"));
  EXPECT_EQ(store_->Stats().num_objects, 1u);
}

TEST_F(ObjectStoreTest, DeleteWhilePinnedFreesAtLastRelease) {
  MakeStore(64 * kKiB);
  Put("a", 4 * kKiB, CopyKind::kPrimary);
  ASSERT_TRUE(store_->Get("a", kReader).ok());
  ASSERT_TRUE(store_->Get("a", 3).ok());
  ASSERT_TRUE(store_->Delete("a").ok());
  ASSERT_TRUE(store_->Delete("a").ok());  // Twice is fine.
  EXPECT_FALSE(store_->Contains("a"));
  EXPECT_FALSE(store_->IsSealed("a"));
  EXPECT_THAT(store_->Get("a", kReader).status().message(),
              HasSubstr("deleted by its owner"));
  absl::Status recreate =
      store_->Create("a", 1, 0, kProducer, CopyKind::kPrimary).status();
  EXPECT_EQ(recreate.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(recreate.message(), HasSubstr("still held"));
  EXPECT_EQ(store_->Stats().used_bytes, 4 * kKiB) << "still mapped by readers";

  ASSERT_TRUE(store_->Release("a", kReader).ok());
  EXPECT_EQ(store_->Stats().used_bytes, 4 * kKiB);
  ASSERT_TRUE(store_->Release("a", 3).ok());
  EXPECT_EQ(store_->Stats().used_bytes, 0u);
  EXPECT_EQ(store_->Stats().num_objects, 0u);
  EXPECT_TRUE(store_->Create("a", 1, 0, kProducer, CopyKind::kPrimary).ok());
}

TEST_F(ObjectStoreTest, DeleteWhileBeingCreatedFreesAtSeal) {
  MakeStore(64 * kKiB);
  ASSERT_TRUE(store_->Create("a", 100, 0, kProducer, CopyKind::kPrimary).ok());
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_EQ(store_->Stats().used_bytes, 128u) << "the producer still writes";
  ASSERT_TRUE(store_->Seal("a", kProducer).ok());
  EXPECT_EQ(store_->Stats().used_bytes, 0u);
  EXPECT_EQ(store_->Stats().num_objects, 0u);
}

TEST_F(ObjectStoreTest, EvictsSecondaryCopiesLeastRecentlyUsedFirst) {
  MakeStore(4 * kKiB);
  for (const char* id : {"a", "b", "c", "d"}) {
    Put(id, kKiB, CopyKind::kSecondary);
  }
  // Reading b makes it the most recently used.
  ExpectContents("b");
  Put("e", kKiB, CopyKind::kSecondary);
  Put("f", kKiB, CopyKind::kSecondary);
  EXPECT_THAT(evicted_, ElementsAre("a", "c"));
  EXPECT_FALSE(store_->Contains("a"));
  EXPECT_FALSE(store_->Contains("c"));
  // Layout now: e b f d. Touch them so that the two oldest are neighbours.
  for (const char* id : {"e", "b", "d", "f"}) ExpectContents(id);
  // A larger object evicts as many as it needs, in order.
  Put("g", 2 * kKiB, CopyKind::kSecondary);
  EXPECT_THAT(evicted_, ElementsAre("a", "c", "e", "b"));
  ObjectStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.evictions, 4u);
  EXPECT_EQ(stats.evicted_bytes, 4 * kKiB);
  EXPECT_EQ(stats.spills, 0u);
}

TEST_F(ObjectStoreTest, EvictsSecondaryCopiesBeforeSpillingPrimaries) {
  MakeStore(3 * kKiB);
  Put("primary", kKiB, CopyKind::kPrimary);  // Least recently used.
  Put("secondary", kKiB, CopyKind::kSecondary);
  Put("other", kKiB, CopyKind::kPrimary);
  Put("new", kKiB, CopyKind::kPrimary);
  EXPECT_THAT(evicted_, ElementsAre("secondary"));
  EXPECT_EQ(StateOf("primary"), ObjectState::kSealed);
  EXPECT_EQ(store_->Stats().spills, 0u);
  Put("newer", kKiB, CopyKind::kPrimary);
  EXPECT_EQ(StateOf("primary"), ObjectState::kSpilled);
  EXPECT_EQ(StateOf("other"), ObjectState::kSealed);
  EXPECT_TRUE(store_->Contains("primary"));
  EXPECT_TRUE(store_->IsSealed("primary"));
  ASSERT_TRUE(store_->Delete("primary").ok());
}

TEST_F(ObjectStoreTest, SpillsAndRestoresByteExact) {
  MakeStore(64 * kKiB);
  // Odd sizes so that data and metadata do not end on block boundaries.
  std::vector<ObjectId> ids;
  for (int i = 0; i < 12; ++i) {
    ids.push_back(absl::StrCat("obj", i));
    Put(ids.back(), 10 * kKiB + 7 * i + 1, CopyKind::kPrimary);
  }
  ObjectStoreStats stats = store_->Stats();
  EXPECT_GT(stats.num_spilled, 0u);
  EXPECT_EQ(stats.spills, stats.num_spilled);
  EXPECT_EQ(stats.evictions, 0u) << "primary copies are never just dropped";
  EXPECT_EQ(StateOf("obj0"), ObjectState::kSpilled);
  std::string spill_file = store_->Lookup("obj0")->spill_location;
  EXPECT_TRUE(FileExists(spill_file)) << spill_file;
  EXPECT_EQ(spill_file.rfind(spill_dir_, 0), 0u);

  // Reading every object restores the spilled ones, spilling others.
  for (int round = 0; round < 2; ++round) {
    for (const ObjectId& id : ids) ExpectContents(id);
  }
  EXPECT_FALSE(FileExists(spill_file)) << "restored: the file is removed";
  stats = store_->Stats();
  EXPECT_GT(stats.restores, 12u);
  EXPECT_EQ(stats.num_objects, 12u);
  EXPECT_EQ(stats.num_sealed + stats.num_spilled, 12u);

  // Deleting a spilled object removes its file.
  ObjectId spilled;
  for (const ObjectId& id : ids) {
    if (StateOf(id) == ObjectState::kSpilled) spilled = id;
  }
  ASSERT_FALSE(spilled.empty());
  std::string file = store_->Lookup(spilled)->spill_location;
  ASSERT_TRUE(store_->Delete(spilled).ok());
  EXPECT_FALSE(FileExists(file));
}

TEST_F(ObjectStoreTest, SpillFailureKeepsTheObjectInMemory) {
  MakeStore(4 * kKiB);
  for (const char* id : {"a", "b", "c", "d"}) Put(id, kKiB, CopyKind::kPrimary);
  spill_->fail_writes = true;
  auto refused = store_->Create("e", kKiB, 0, kProducer, CopyKind::kPrimary);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("disk full"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("spilling to ", spill_dir_, " failed")));
  EXPECT_FALSE(store_->Contains("e"));
  EXPECT_EQ(StateOf("a"), ObjectState::kSealed);
  EXPECT_EQ(store_->Stats().spill_failures, 1u);
  for (const char* id : {"a", "b", "c", "d"}) ExpectContents(id);

  // Once the disk has room, the same request goes through.
  spill_->fail_writes = false;
  Put("e", kKiB, CopyKind::kPrimary);
  EXPECT_EQ(store_->Stats().num_spilled, 1u);
}

TEST_F(ObjectStoreTest, RestoreFailureIsDataLossAndLeaksNothing) {
  MakeStore(2 * kKiB);
  Put("a", kKiB, CopyKind::kPrimary);
  Put("b", kKiB, CopyKind::kPrimary);
  Put("c", kKiB, CopyKind::kPrimary);  // Spills a.
  ASSERT_EQ(StateOf("a"), ObjectState::kSpilled);
  ASSERT_EQ(unlink(store_->Lookup("a")->spill_location.c_str()), 0);
  uint64_t used = store_->Stats().used_bytes;
  absl::Status lost = store_->Get("a", kReader).status();
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(lost.message(), HasSubstr("cannot restore spilled object a"));
  EXPECT_LE(store_->Stats().used_bytes, used);
  ASSERT_TRUE(store_->Delete("a").ok());  // A missing file is no error.
}

TEST_F(ObjectStoreTest, PinnedObjectsAreNeverEvictedOrSpilled) {
  MakeStore(8 * kKiB);
  Put("p1", 2 * kKiB, CopyKind::kPrimary);
  Put("s1", 2 * kKiB, CopyKind::kSecondary);
  Put("p2", 2 * kKiB, CopyKind::kPrimary);
  for (const char* id : {"p1", "s1", "p2"}) {
    ASSERT_TRUE(store_->Get(id, kReader).ok());
  }
  ASSERT_TRUE(store_->Create("w", kKiB, 0, 7, CopyKind::kPrimary).ok());

  auto refused =
      store_->Create("big", 3 * kKiB, 0, kProducer, CopyKind::kPrimary);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("cannot create object big of 3.0 KiB"));
  EXPECT_THAT(message, HasSubstr("store capacity 8.0 KiB"));
  EXPECT_THAT(message, HasSubstr("6.0 KiB pinned by 3 objects in use"));
  EXPECT_THAT(message, HasSubstr("1.0 KiB being created by 1 objects"));
  EXPECT_THAT(message, HasSubstr("largest free block 1.0 KiB"));
  EXPECT_THAT(message, HasSubstr("Release references"));
  EXPECT_THAT(message, HasSubstr("larger --object-store-memory"));
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(spill_->writes, 0) << "nothing is thrown out in vain";
  for (const char* id : {"p1", "s1", "p2"}) {
    EXPECT_EQ(StateOf(id), ObjectState::kSealed) << id;
  }
  // Releasing one makes room.
  ASSERT_TRUE(store_->Release("s1", kReader).ok());
  EXPECT_TRUE(
      store_->Create("big", 2 * kKiB, 0, kProducer, CopyKind::kPrimary).ok());
  EXPECT_THAT(evicted_, ElementsAre("s1"));
}

TEST_F(ObjectStoreTest, ObjectLargerThanTheStoreFailsAtOnce) {
  MakeStore(64 * kKiB);
  Put("a", kKiB, CopyKind::kSecondary);
  auto huge =
      store_->Create("huge", 65 * kKiB, 0, kProducer, CopyKind::kPrimary);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.status().message(),
              HasSubstr("larger than the whole object store (64.0 KiB)"));
  EXPECT_THAT(huge.status().message(),
              HasSubstr("--object-store-memory of at least 65.0 KiB"));
  EXPECT_TRUE(store_->Contains("a")) << "nothing evicted for it";
  auto overflow = store_->Create("x", UINT64_MAX, 1, 1, CopyKind::kPrimary);
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  auto max = store_->Create("y", UINT64_MAX, 0, 1, CopyKind::kPrimary);
  EXPECT_EQ(max.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ObjectStoreTest, WithoutSpillStoragePrimariesStay) {
  MakeStore(2 * kKiB, /*spill=*/false);
  Put("a", kKiB, CopyKind::kPrimary);
  Put("b", kKiB, CopyKind::kPrimary);
  auto refused = store_->Create("c", kKiB, 0, kProducer, CopyKind::kPrimary);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("spilling is disabled"));
  EXPECT_TRUE(store_->IsSealed("a"));
  EXPECT_TRUE(store_->IsSealed("b"));
}

TEST_F(ObjectStoreTest, ReleaseClientDropsPinsAndAbortsCreates) {
  MakeStore(64 * kKiB);
  constexpr ClientId kDead = 9;
  Put("x", kKiB, CopyKind::kPrimary);
  Put("y", kKiB, CopyKind::kPrimary);
  ASSERT_TRUE(store_->Get("x", kDead).ok());
  ASSERT_TRUE(store_->Get("x", kDead).ok());
  ASSERT_TRUE(store_->Get("y", kDead).ok());
  ASSERT_TRUE(store_->Get("y", kReader).ok());
  ASSERT_TRUE(store_->Create("z", kKiB, 0, kDead, CopyKind::kPrimary).ok());
  ASSERT_TRUE(store_->Delete("x").ok());  // Freed when kDead lets go.

  EXPECT_EQ(store_->ReleaseClient(kDead), 4);
  EXPECT_FALSE(store_->Contains("x"));
  EXPECT_FALSE(store_->Contains("z"));
  EXPECT_EQ(store_->Lookup("y")->pins, 1) << "other clients keep theirs";
  EXPECT_EQ(store_->ReleaseClient(kDead), 0);
  ASSERT_TRUE(store_->Release("y", kReader).ok());
  ObjectStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.num_objects, 1u);
  EXPECT_EQ(stats.num_pinned, 0u);
  EXPECT_EQ(stats.used_bytes, kKiB);
}

TEST_F(ObjectStoreTest, BinaryIdsAreShownInHex) {
  MakeStore(64 * kKiB);
  std::string id("\x01\xff", 2);
  Put(id, 10, CopyKind::kPrimary);
  EXPECT_THAT(store_->Seal(id, kProducer).message(), HasSubstr("0x01ff"));
  ASSERT_TRUE(store_->Delete(id).ok());
}

// Many lifecycles with a window of live objects in a small store (so that
// some are spilled and restored) end with nothing used: no leak.
TEST_F(ObjectStoreTest, HundredThousandCyclesLeaveNothingBehind) {
  MakeStore(64 * kKiB);
  std::mt19937 rng(7);
  std::deque<ObjectId> live;
  for (int i = 0; i < 100000; ++i) {
    ObjectId id = absl::StrCat("o", i);
    uint64_t size = rng() % 8 == 0 ? rng() % (32 * kKiB) : rng() % 512;
    auto location =
        store_->Create(id, size, rng() % 64, kProducer,
                       i % 3 == 0 ? CopyKind::kSecondary : CopyKind::kPrimary);
    ASSERT_TRUE(location.ok()) << i << ": " << location.status();
    if (size > 0) At(*location)[0] = static_cast<uint8_t>(i);
    ASSERT_TRUE(store_->Seal(id, kProducer).ok());
    auto got = store_->Get(id, kReader);
    ASSERT_TRUE(got.ok()) << got.status();
    if (size > 0) {
      ASSERT_EQ(At(*got)[0], static_cast<uint8_t>(i));
    }
    ASSERT_TRUE(store_->Release(id, kReader).ok());
    live.push_back(id);
    if (i % 10 == 0) {
      // Read an old one again: restores it if spilled.
      const ObjectId& old = live.front();
      auto again = store_->Get(old, kReader);
      if (again.ok()) {
        ASSERT_TRUE(store_->Release(old, kReader).ok());
      } else {
        ASSERT_TRUE(absl::IsNotFound(again.status())) << again.status();
      }
    }
    if (live.size() > 16) {
      // Evicted secondary copies are gone already; that is fine.
      absl::Status deleted = store_->Delete(live.front());
      ASSERT_TRUE(deleted.ok() || absl::IsNotFound(deleted)) << deleted;
      live.pop_front();
    }
  }
  for (const ObjectId& id : live) {
    absl::Status deleted = store_->Delete(id);
    ASSERT_TRUE(deleted.ok() || absl::IsNotFound(deleted)) << deleted;
  }
  ObjectStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.num_objects, 0u);
  EXPECT_EQ(stats.pinned_bytes + stats.creating_bytes + stats.evictable_bytes,
            0u);
  EXPECT_EQ(stats.num_spilled, 0u);
  EXPECT_EQ(stats.largest_free, stats.capacity) << "coalesced back to one";
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_GT(stats.spills, 0u);
  EXPECT_GT(stats.restores, 0u);
}

TEST(FolderSpillStorageTest, WritesReadsAndRemovesFiles) {
  char dir[] = "/tmp/shoal-folder-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string nested = absl::StrCat(dir, "/a/b");
  auto storage = FolderSpillStorage::Create(nested);
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::string bytes = "hello spill";
  auto location = (*storage)->Write(
      "id", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(location.ok()) << location.status();
  std::string back(bytes.size(), '\0');
  ASSERT_TRUE((*storage)
                  ->Read(*location, reinterpret_cast<uint8_t*>(back.data()),
                         back.size())
                  .ok());
  EXPECT_EQ(back, bytes);
  // Asking for more than was written is data loss, not garbage.
  std::string longer(bytes.size() + 1, '\0');
  absl::Status truncated = (*storage)->Read(
      *location, reinterpret_cast<uint8_t*>(longer.data()), longer.size());
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE((*storage)->Remove(*location).ok());
  EXPECT_FALSE(FileExists(*location));
  EXPECT_TRUE((*storage)->Remove(*location).ok());
  EXPECT_EQ(rmdir(nested.c_str()), 0);
  rmdir(absl::StrCat(dir, "/a").c_str());
  rmdir(dir);

  auto bad = FolderSpillStorage::Create("/proc/shoal-no-such/x");
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace shoal::object_store
