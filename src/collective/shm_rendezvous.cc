#include "collective/shm_rendezvous.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/environment.h"

namespace shoal::collective::internal::shm {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLivenessPeriod{100};

// A process that exists and is not a zombie (a rank that exited while its
// parent has not reaped it yet is dead to us).
bool ProcessRunning(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return true;  // another pid namespace or no /proc: trust kill
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

Rendezvous::Rendezvous(const TransportOptions& options, Header* header,
                       RankControl* control)
    : options_(options),
      size_(options.size),
      rank_(options.rank),
      timeout_(options.timeout),
      spins_(static_cast<int>(env::GetInt(env::Var::kShmSpins))),
      header_(header),
      control_(control) {}

absl::Status Rendezvous::CheckAborted() {
  if (header_->abort_state.load(std::memory_order_acquire) == 0) {
    return absl::OkStatus();
  }
  return AbortedStatus();
}

absl::Status Rendezvous::AbortedStatus() {
  while (header_->abort_state.load(std::memory_order_acquire) != 2) {
    CpuRelax();
  }
  std::vector<int> ranks(header_->abort_ranks,
                         header_->abort_ranks + header_->num_abort_ranks);
  return GroupRankFailure(static_cast<absl::StatusCode>(header_->abort_code),
                          header_->abort_message, ranks);
}

absl::Status Rendezvous::Fail(const absl::Status& status) {
  Abort(status);
  return AbortedStatus();
}

// Fails naming the peers that died.
absl::Status Rendezvous::CheckPeers() {
  std::vector<int> dead;
  const pid_t self = getpid();
  for (int j = 0; j < size_; ++j) {
    pid_t pid = control_[j].pid.load(std::memory_order_relaxed);
    if (j == rank_ || pid <= 0 || pid == self) continue;
    if (!ProcessRunning(pid)) dead.push_back(j);
  }
  if (dead.empty()) return absl::OkStatus();
  return Fail(
      GroupRankFailure(absl::StatusCode::kUnavailable,
                       absl::StrCat(DescribeRanks(options_, dead), " died"),
                       GroupRanks(options_, dead)));
}

// Waits until peer's counter reaches target.
absl::Status Rendezvous::WaitOne(Counter* counter, int peer, uint32_t target,
                                 Deadline* deadline) {
  for (int i = 0; i < spins_; ++i) {
    if (Reached(counter->value.load(std::memory_order_acquire), target)) {
      return absl::OkStatus();
    }
    CpuRelax();
  }
  while (true) {
    if (Reached(counter->value.load(std::memory_order_acquire), target)) {
      return absl::OkStatus();
    }
    if (header_->abort_state.load(std::memory_order_acquire) != 0) {
      return AbortedStatus();
    }
    if (control_[peer].left.load(std::memory_order_acquire) != 0) {
      // It may have published, finished and left since the check above:
      // what it wrote before leaving is visible now.
      if (Reached(counter->value.load(std::memory_order_acquire), target)) {
        return absl::OkStatus();
      }
      return Fail(GroupRankFailure(
          absl::StatusCode::kUnavailable,
          absl::StrCat(DescribeRank(options_, peer),
                       " left the group (destroyed it, or its thread "
                       "ended) in the middle of an operation"),
          {GroupRank(options_, peer)}));
    }
    Clock::time_point now = Clock::now();
    if (now >= deadline->next_liveness_check) {
      if (absl::Status s = CheckPeers(); !s.ok()) return s;
      deadline->next_liveness_check = now + kLivenessPeriod;
    }
    if (now >= deadline->end) return TimedOut(counter, target);
    auto wait = std::min(kLivenessPeriod,
                         std::chrono::ceil<milliseconds>(deadline->end - now));
    counter->waiters.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = counter->value.load(std::memory_order_seq_cst);
    if (!Reached(seen, target) &&
        header_->abort_state.load(std::memory_order_seq_cst) == 0) {
      FutexWait(&counter->value, seen, std::max(wait, milliseconds(1)));
    }
    counter->waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

// Names every rank behind on the counter that timed out.
absl::Status Rendezvous::TimedOut(Counter* counter, uint32_t target) {
  size_t field =
      reinterpret_cast<char*>(counter) - reinterpret_cast<char*>(control_);
  field %= sizeof(RankControl);
  std::vector<int> behind;
  for (int j = 0; j < size_; ++j) {
    auto* c = reinterpret_cast<Counter*>(reinterpret_cast<char*>(&control_[j]) +
                                         field);
    if (!Reached(c->value.load(std::memory_order_acquire), target)) {
      behind.push_back(j);
    }
  }
  return Fail(GroupRankFailure(
      absl::StatusCode::kDeadlineExceeded,
      absl::StrCat(DescribeRanks(options_, behind), " did not answer within ",
                   timeout_.count(),
                   " ms (stuck, or not making the same calls)"),
      GroupRanks(options_, behind)));
}

// Waits for every peer; checks their descriptors of `describe_step` when
// it is >= 0.
absl::Status Rendezvous::WaitAll(Counter RankControl::*which, uint32_t target,
                                 int64_t describe_step) {
  Deadline deadline = StartWait();
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    if (absl::Status s = WaitOne(&(control_[j].*which), j, target, &deadline);
        !s.ok()) {
      return s;
    }
    if (describe_step >= 0) {
      if (absl::Status s =
              CheckDescriptor(static_cast<uint32_t>(describe_step), j);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

// REQUIRES: peer has published `in` for `step`.
absl::Status Rendezvous::CheckDescriptor(uint32_t step, int peer) {
  const OpDescriptor& mine = control_[rank_].ops[step % kPipelineDepth];
  const OpDescriptor& theirs = control_[peer].ops[step % kPipelineDepth];
  if (mine == theirs) return absl::OkStatus();
  return Fail(GroupRankFailure(
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("the ranks called different operations: ",
                   DescribeRank(options_, peer), " called ", theirs.ToString(),
                   " while ", DescribeRank(options_, rank_), " called ",
                   mine.ToString(),
                   "; every rank must make the same calls in the same "
                   "order with the same counts, types and roots"),
      {GroupRank(options_, peer)}));
}

Rendezvous::Deadline Rendezvous::StartWait() const {
  Clock::time_point now = Clock::now();
  return {now + timeout_, now + kLivenessPeriod};
}

void Rendezvous::Publish(Counter* counter, uint32_t value) {
  counter->value.store(value, std::memory_order_seq_cst);
  if (counter->waiters.load(std::memory_order_seq_cst) != 0) {
    FutexWakeAll(&counter->value);
  }
}

void Rendezvous::Describe(uint32_t step, OpKind kind, DataType type,
                          ReduceOp op, int root, size_t count) {
  control_[rank_].ops[step % kPipelineDepth] = {step,
                                                static_cast<uint32_t>(kind),
                                                static_cast<uint32_t>(type),
                                                static_cast<uint32_t>(op),
                                                root,
                                                static_cast<uint64_t>(count)};
}

void Rendezvous::Abort(const absl::Status& status) {
  uint32_t expected = 0;
  if (header_->abort_state.compare_exchange_strong(expected, 1)) {
    header_->abort_code = static_cast<int32_t>(status.code());
    std::vector<int> ranks = FailedGroupRanks(status, options_.group_ranks);
    header_->num_abort_ranks =
        static_cast<uint32_t>(std::min(ranks.size(), kMaxAbortRanks));
    for (uint32_t i = 0; i < header_->num_abort_ranks; ++i) {
      header_->abort_ranks[i] = ranks[i];
    }
    std::string message(status.message());
    size_t n = std::min(message.size(), sizeof(header_->abort_message) - 1);
    std::memcpy(header_->abort_message, message.data(), n);
    header_->abort_message[n] = '\0';
    header_->abort_state.store(2, std::memory_order_release);
  }
  for (int j = 0; j < size_; ++j) {
    FutexWakeAll(&control_[j].in.value);
    FutexWakeAll(&control_[j].reduced.value);
    FutexWakeAll(&control_[j].done.value);
  }
}

}  // namespace shoal::collective::internal::shm
