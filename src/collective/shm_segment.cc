#include "collective/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/environment.h"

namespace shoal::collective::internal::shm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x314d535f4c414f53ull;  // "SOAL_SM1"
constexpr size_t kPage = 4096;
constexpr size_t kDefaultSlotBytes = 512 << 10;
constexpr size_t kMaxSegmentDataBytes = 64 << 20;
constexpr size_t kMinSlotBytes = 64 << 10;

const char* OpKindName(uint32_t kind) {
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kAllReduce:
      return "all-reduce";
    case OpKind::kAllGather:
      return "all-gather";
    case OpKind::kReduceScatter:
      return "reduce-scatter";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kReduce:
      return "reduce";
  }
  return "unknown operation";
}

struct Layout {
  size_t control_offset;
  size_t data_offset;
  size_t total;
};

Layout LayoutFor(int size, size_t slot_bytes) {
  Layout layout;
  layout.control_offset = RoundUp(sizeof(Header), kLine);
  layout.data_offset =
      RoundUp(layout.control_offset + size * sizeof(RankControl), kPage);
  layout.total = layout.data_offset + kPipelineDepth * size * slot_bytes;
  return layout;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

// Rank 0: makes the segment (a memfd, so that nothing outlives the ranks even
// if they crash), publishes its path and waits until everyone mapped it.
absl::StatusOr<char*> CreateSegment(const TransportOptions& options,
                                    size_t slot_bytes, const Layout& layout,
                                    const std::string& key) {
  int fd = memfd_create("shoal-collective", MFD_CLOEXEC);
  if (fd < 0) return Errno("memfd_create for the shared-memory transport");
  if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    absl::Status s = Errno(absl::StrCat("sizing the ", layout.total,
                                        "-byte shared-memory segment"));
    close(fd);
    return s;
  }
  void* base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    absl::Status s = Errno("mapping the shared-memory segment");
    close(fd);
    return s;
  }
  char* bytes = static_cast<char*>(base);
  std::memset(bytes, 0, layout.data_offset);
  auto* header = new (bytes) Header();
  header->magic = kMagic;
  header->nonce = std::random_device()() |
                  (static_cast<uint64_t>(std::random_device()()) << 32);
  header->size = options.size;
  header->slot_bytes = slot_bytes;
  header->control_offset = layout.control_offset;
  header->data_offset = layout.data_offset;
  auto* control = reinterpret_cast<RankControl*>(bytes + layout.control_offset);
  for (int j = 0; j < options.size; ++j) new (&control[j]) RankControl();
  control[options.rank].pid.store(getpid());
  try {
    options.store->Set(key, absl::StrCat("/proc/", getpid(), "/fd/", fd, " ",
                                         header->nonce, " ", layout.total));
  } catch (const std::exception& e) {
    close(fd);
    munmap(base, layout.total);
    return absl::UnavailableError(e.what());
  }
  // The path works only while the fd is open: keep it until every rank has
  // mapped the segment.
  auto deadline = Clock::now() + options.timeout;
  while (true) {
    uint32_t attached = header->attached.load(std::memory_order_acquire);
    if (attached + 1 >= static_cast<uint32_t>(options.size)) break;
    auto now = Clock::now();
    if (now >= deadline) {
      std::vector<std::string> missing;
      std::vector<int> ranks;
      for (int j = 0; j < options.size; ++j) {
        if (control[j].pid.load() == 0) {
          missing.push_back(DescribeRank(options, j));
          ranks.push_back(GroupRank(options, j));
        }
      }
      close(fd);
      munmap(base, layout.total);
      return GroupRankFailure(
          absl::StatusCode::kDeadlineExceeded,
          absl::StrCat(absl::StrJoin(missing, ", "),
                       " did not map the shared-memory segment within ",
                       options.timeout.count(), " ms"),
          ranks);
    }
    FutexWait(&header->attached, attached, milliseconds(50));
  }
  close(fd);
  return bytes;
}

absl::StatusOr<char*> OpenSegment(const TransportOptions& options,
                                  size_t slot_bytes, const Layout& layout,
                                  const std::string& key) {
  std::string value;
  try {
    value = options.store->Get(key, options.timeout);
  } catch (const std::exception& e) {
    return GroupRankFailure(
        absl::StatusCode::kDeadlineExceeded,
        absl::StrCat(DescribeRank(options, 0),
                     " did not publish the shared-memory segment: ", e.what()),
        {GroupRank(options, 0)});
  }
  std::vector<std::string> parts = absl::StrSplit(value, ' ');
  uint64_t nonce = 0;
  size_t total = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &nonce) ||
      !absl::SimpleAtoi(parts[2], &total)) {
    return absl::InternalError(
        absl::StrCat("malformed shared-memory segment address '", value, "'"));
  }
  if (total != layout.total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shared-memory segment of ", DescribeRank(options, 0), " has ",
        total, " bytes where ", layout.total,
        " were expected: do the ranks run the same Shoal build with the same "
        "SHOAL_SHM_SLOT_BYTES?"));
  }
  int fd = open(parts[0].c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Errno(absl::StrCat("opening the shared-memory segment ", parts[0],
                              " of ", DescribeRank(options, 0),
                              " (are all ranks of this host in one pid "
                              "namespace, and is it still running?)"));
  }
  void* base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("mapping the shared-memory segment");
  char* bytes = static_cast<char*>(base);
  auto* header = reinterpret_cast<Header*>(bytes);
  if (header->magic != kMagic || header->nonce != nonce ||
      header->size != static_cast<uint64_t>(options.size) ||
      header->slot_bytes != slot_bytes) {
    munmap(base, layout.total);
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared-memory segment at ", parts[0],
        " belongs to another group (a stale rendezvous key? give the group "
        "a new generation)"));
  }
  auto* control = reinterpret_cast<RankControl*>(bytes + layout.control_offset);
  control[options.rank].pid.store(getpid());
  header->attached.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&header->attached);
  return bytes;
}

}  // namespace

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               milliseconds timeout) {
  timespec ts;
  ts.tv_sec = timeout.count() / 1000;
  ts.tv_nsec = (timeout.count() % 1000) * 1000000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

std::string OpDescriptor::ToString() const {
  std::string s = absl::StrCat(OpKindName(kind), "(count ", count, ", ",
                               "type ", type, ", op ", op);
  if (root >= 0) absl::StrAppend(&s, ", root ", root);
  return s + ")";
}

absl::StatusOr<Segment> Segment::Attach(const TransportOptions& options) {
  size_t slot_bytes = std::clamp(
      kMaxSegmentDataBytes / kPipelineDepth / static_cast<size_t>(options.size),
      kMinSlotBytes, kDefaultSlotBytes);
  if (std::optional<int64_t> chosen = env::FindInt(env::Var::kShmSlotBytes)) {
    slot_bytes = static_cast<size_t>(*chosen);
  }
  slot_bytes = RoundUp(std::max(slot_bytes, kPage), kPage);
  Layout layout = LayoutFor(options.size, slot_bytes);
  std::string key = options.key_prefix + "shm";
  absl::StatusOr<char*> base =
      options.rank == 0 ? CreateSegment(options, slot_bytes, layout, key)
                        : OpenSegment(options, slot_bytes, layout, key);
  if (!base.ok()) return base.status();
  return Segment(*base, layout.total);
}

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

}  // namespace shoal::collective::internal::shm
