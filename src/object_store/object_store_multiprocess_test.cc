// The store serving real processes: the test process plays the node agent
// (it owns the store and answers requests on one thread, as the agent's
// event loop would), and forked children play workers. Each child maps the
// arena itself with ShmArena::Open, creates and writes its own objects, and
// reads every other child's objects in place while they are being produced.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "object_store/object_store.h"

namespace shoal::object_store {
namespace {

constexpr int kChildren = 4;
constexpr int kObjectsPerChild = 16;
constexpr uint64_t kMaxObjectSize = 256 * 1024;
// Smaller than all objects together (about 8 MiB), so some are spilled and
// restored while children read them.
constexpr uint64_t kCapacity = 6 * 1024 * 1024;

// The wire protocol: one fixed-size message per SOCK_SEQPACKET datagram.
enum class Op : uint32_t { kCreate, kSeal, kGet, kRelease };

struct Request {
  Op op;
  uint32_t id_size;
  char id[ObjectStore::kMaxIdSize];
  uint64_t data_size;
  uint64_t metadata_size;
};

struct Response {
  int32_t code;  // absl::StatusCode
  uint64_t offset;
  uint64_t data_size;
  uint64_t metadata_size;
  char message[256];
};

std::string ObjectName(int child, int k) {
  return absl::StrCat("child", child, "-obj", k);
}

uint64_t ObjectSize(int child, int k) {
  return 1 +
         (static_cast<uint64_t>(child) * 7919 + k * 104729) % kMaxObjectSize;
}

uint8_t PatternByte(int child, int k, uint64_t i) {
  return static_cast<uint8_t>(child * 31 + k * 7 + i * 13 + (i >> 9));
}

// Runs in the parent: answers one request.
Response Serve(ObjectStore& store, ClientId client, const Request& request) {
  Response response = {};
  ObjectId id(request.id, request.id_size);
  // Seal and Release answer an empty location.
  absl::StatusOr<ObjectLocation> location = ObjectLocation{};
  absl::Status status;
  switch (request.op) {
    case Op::kCreate:
      location =
          store.Create(id, request.data_size, request.metadata_size, client,
                       CopyKind::kPrimary, absl::StrCat("child-", client));
      break;
    case Op::kGet:
      location = store.Get(id, client);
      break;
    case Op::kSeal:
      status = store.Seal(id, client);
      break;
    case Op::kRelease:
      status = store.Release(id, client);
      break;
  }
  if (!status.ok()) location = status;
  response.code = static_cast<int32_t>(location.status().code());
  if (location.ok()) {
    response.offset = location->offset;
    response.data_size = location->data_size;
    response.metadata_size = location->metadata_size;
  } else {
    std::snprintf(response.message, sizeof(response.message), "%s",
                  std::string(location.status().message()).c_str());
  }
  return response;
}

// The child's side: a client of the store.
class Client {
 public:
  Client(int fd, int child) : fd_(fd), child_(child) {}

  Response Call(Op op, const std::string& id, uint64_t data_size = 0,
                uint64_t metadata_size = 0) {
    Request request = {};
    request.op = op;
    request.id_size = static_cast<uint32_t>(id.size());
    std::memcpy(request.id, id.data(), id.size());
    request.data_size = data_size;
    request.metadata_size = metadata_size;
    Response response = {};
    if (send(fd_, &request, sizeof(request), MSG_NOSIGNAL) != sizeof(request) ||
        recv(fd_, &response, sizeof(response), 0) != sizeof(response)) {
      Fail(absl::StrCat("lost the store: ", std::strerror(errno)));
    }
    return response;
  }

  // Calls until the answer is not `retry_code`s (the object is not there
  // yet, or the store is momentarily full).
  Response CallRetrying(Op op, const std::string& id, uint64_t data_size = 0,
                        uint64_t metadata_size = 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (true) {
      Response response = Call(op, id, data_size, metadata_size);
      auto code = static_cast<absl::StatusCode>(response.code);
      if (code != absl::StatusCode::kNotFound &&
          code != absl::StatusCode::kUnavailable &&
          code != absl::StatusCode::kResourceExhausted) {
        return response;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        Fail(absl::StrCat("gave up on ", id, ": ", response.message));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void Expect(const Response& response, const std::string& what) {
    if (response.code != 0) {
      Fail(absl::StrCat(what, ": ", response.message));
    }
  }

  [[noreturn]] void Fail(const std::string& message) {
    std::fprintf(stderr, "child %d: %s\n", child_, message.c_str());
    _exit(1);
  }

 private:
  int fd_;
  int child_;
};

// Gets, checks and releases the k-th object of every other child.
void ReadOthers(Client& client, const uint8_t* base, int child, int k) {
  for (int other = 0; other < kChildren; ++other) {
    if (other == child) continue;
    std::string their = ObjectName(other, k);
    Response got = client.CallRetrying(Op::kGet, their);
    client.Expect(got, "get " + their);
    uint64_t their_size = ObjectSize(other, k);
    if (got.data_size + got.metadata_size != their_size) {
      client.Fail(
          absl::StrCat(their, " has size ", got.data_size + got.metadata_size));
    }
    for (uint64_t i = 0; i < their_size; ++i) {
      if (base[got.offset + i] != PatternByte(other, k, i)) {
        client.Fail(absl::StrCat(their, " differs at byte ", i));
      }
    }
    client.Expect(client.Call(Op::kRelease, their), "release " + their);
  }
}

// The body of child `child`; never returns. Leaves the inherited store
// alone (its destructor would remove the arena) and exits with _exit.
[[noreturn]] void RunChild(int fd, int child, const std::string& arena_path) {
  Client client(fd, child);
  absl::StatusOr<std::unique_ptr<ShmArena>> arena = ShmArena::Open(arena_path);
  if (!arena.ok()) client.Fail(std::string(arena.status().message()));
  uint8_t* base = (*arena)->data();

  for (int k = 0; k < kObjectsPerChild; ++k) {
    std::string id = ObjectName(child, k);
    uint64_t size = ObjectSize(child, k);
    uint64_t metadata = size % 64;
    Response created =
        client.CallRetrying(Op::kCreate, id, size - metadata, metadata);
    client.Expect(created, "create " + id);
    for (uint64_t i = 0; i < size; ++i) {
      base[created.offset + i] = PatternByte(child, k, i);
    }
    client.Expect(client.Call(Op::kSeal, id), "seal " + id);

    // Read the others' k-th objects, which they are producing right now.
    ReadOthers(client, base, child, k);
  }
  // Read everything again: the oldest objects have been spilled by now and
  // come back from disk while the other children do the same.
  for (int k = 0; k < kObjectsPerChild; ++k) ReadOthers(client, base, child, k);
  _exit(0);
}

TEST(ObjectStoreMultiprocessTest, ChildrenCreateSealAndReadEachOther) {
  char spill_dir[] = "/tmp/shoal-mp-spill-XXXXXX";
  ASSERT_NE(mkdtemp(spill_dir), nullptr);
  auto arena = ShmArena::Create(absl::StrCat("mp-test-", getpid()), kCapacity);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const std::string arena_path = (*arena)->path();
  auto spill = FolderSpillStorage::Create(spill_dir);
  ASSERT_TRUE(spill.ok()) << spill.status();
  ObjectStore store(*std::move(arena), *std::move(spill));

  int parent_fds[kChildren];
  int child_fds[kChildren];
  for (int i = 0; i < kChildren; ++i) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
    parent_fds[i] = pair[0];
    child_fds[i] = pair[1];
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int j = 0; j < kChildren; ++j) {
        close(parent_fds[j]);
        if (j != i) close(child_fds[j]);
      }
      RunChild(child_fds[i], i, arena_path);
    }
    pids.push_back(pid);
  }
  for (int i = 0; i < kChildren; ++i) close(child_fds[i]);

  // The agent's loop: serve whoever asks until every child hangs up, then
  // drop what it held (as the agent does when a process exits).
  std::vector<pollfd> fds;
  for (int i = 0; i < kChildren; ++i) fds.push_back({parent_fds[i], POLLIN, 0});
  int open_clients = kChildren;
  uint64_t requests = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (open_clients > 0 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_GE(poll(fds.data(), fds.size(), 1000), 0);
    for (int i = 0; i < kChildren; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      Request request;
      ssize_t n = recv(fds[i].fd, &request, sizeof(request), 0);
      if (n <= 0) {
        store.ReleaseClient(i);
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_clients;
        continue;
      }
      ASSERT_EQ(n, static_cast<ssize_t>(sizeof(request)));
      Response response = Serve(store, i, request);
      ++requests;
      ASSERT_EQ(send(fds[i].fd, &response, sizeof(response), MSG_NOSIGNAL),
                static_cast<ssize_t>(sizeof(response)));
    }
  }
  for (int i = 0; i < kChildren; ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << i << " failed; see its message above";
  }
  ASSERT_EQ(open_clients, 0) << "timed out";

  ObjectStoreStats stats = store.Stats();
  EXPECT_EQ(stats.num_objects, uint64_t{kChildren * kObjectsPerChild});
  EXPECT_EQ(stats.num_pinned, 0u);
  EXPECT_GT(stats.spills, 0u) << "the store was meant to be under pressure";
  EXPECT_GT(stats.restores, 0u);
  std::printf("served %lu requests; %lu spills, %lu restores\n",
              static_cast<unsigned long>(requests),
              static_cast<unsigned long>(stats.spills),
              static_cast<unsigned long>(stats.restores));

  // Every object is intact, including those spilled and restored.
  constexpr ClientId kAgent = 100;
  for (int child = 0; child < kChildren; ++child) {
    for (int k = 0; k < kObjectsPerChild; ++k) {
      std::string id = ObjectName(child, k);
      auto got = store.Get(id, kAgent);
      ASSERT_TRUE(got.ok()) << got.status();
      const uint8_t* bytes = store.arena().data() + got->offset;
      for (uint64_t i = 0; i < got->size(); ++i) {
        ASSERT_EQ(bytes[i], PatternByte(child, k, i)) << id << " byte " << i;
      }
      ASSERT_TRUE(store.Release(id, kAgent).ok());
      ASSERT_TRUE(store.Delete(id).ok());
    }
  }
  EXPECT_EQ(store.Stats().used_bytes, 0u);
  EXPECT_EQ(store.Stats().num_objects, 0u);
  EXPECT_EQ(rmdir(spill_dir), 0) << "spill files were left behind";
}

}  // namespace
}  // namespace shoal::object_store
