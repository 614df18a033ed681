#include "collective/shm_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/reduce.h"
#include "collective/shm_rendezvous.h"
#include "collective/shm_segment.h"

namespace shoal::collective::internal {
namespace {

using shm::FutexWakeAll;
using shm::Header;
using shm::kPipelineDepth;
using shm::OpKind;
using shm::RankControl;
using shm::Rendezvous;
using shm::RoundUp;
using shm::Segment;

constexpr size_t kSmallBytes = 64 << 10;
constexpr size_t kReduceBlockBytes = 8 << 10;
// Where a step's elements go: a chunk of `len` elements split into `size`
// shares aligned to 64 bytes.
struct Shares {
  size_t len;
  size_t share;
  size_t Begin(int s) const { return std::min(s * share, len); }
  size_t End(int s) const { return std::min((s + 1) * share, len); }
};
Shares SharesOf(size_t len, int size, size_t elem) {
  size_t align = std::max<size_t>(1, 64 / elem);
  return {len, RoundUp((len + size - 1) / size, align)};
}

class ShmTransport final : public SharedMemoryTransport {
 public:
  // `segment` is unmapped for a group of one.
  ShmTransport(const TransportOptions& options, Segment segment)
      : options_(options),
        size_(options.size),
        rank_(options.rank),
        segment_(std::move(segment)) {
    if (segment_.mapped()) {
      header_ = segment_.header();
      control_ = segment_.control();
      data_ = segment_.data();
      slot_bytes_ = segment_.slot_bytes();
      sync_.emplace(options_, header_, control_);
    }
  }

  // Tells the peers that this rank left; segment_ unmaps afterwards.
  ~ShmTransport() override {
    if (!segment_.mapped()) return;
    RankControl& me = control_[rank_];
    me.left.store(1, std::memory_order_seq_cst);
    FutexWakeAll(&me.in.value);
    FutexWakeAll(&me.reduced.value);
    FutexWakeAll(&me.done.value);
  }

  absl::Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                         uint32_t tag) override {
    return ReduceImpl(OpKind::kAllReduce, static_cast<char*>(data), count, type,
                      op, -1);
  }

  absl::Status Reduce(void* data, size_t count, DataType type, ReduceOp op,
                      int root, uint32_t tag) override {
    if (root < 0 || root >= size_) return BadRoot(root);
    return ReduceImpl(OpKind::kReduce, static_cast<char*>(data), count, type,
                      op, root);
  }

  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType type, uint32_t tag) override {
    const size_t elem = SizeOf(type);
    const char* in = static_cast<const char*>(input);
    char* out = static_cast<char*>(output);
    char* own = out + rank_ * count * elem;
    if (own != in && count > 0) std::memmove(own, in, count * elem);
    if (size_ == 1) return absl::OkStatus();
    if (absl::Status s = sync_->CheckAborted(); !s.ok()) return s;
    const size_t chunk = std::max<size_t>(1, slot_bytes_ / elem);
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, count - off);
      const uint32_t k = step_;
      if (absl::Status s = Acquire(k); !s.ok()) return s;
      if (len > 0) std::memcpy(Slot(k, rank_), in + off * elem, len * elem);
      if (off == 0) {
        sync_->Describe(k, OpKind::kAllGather, type, ReduceOp::kSum, -1, count);
      }
      Rendezvous::Publish(&control_[rank_].in, k + 1);
      Rendezvous::Deadline deadline = sync_->StartWait();
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        if (absl::Status s =
                sync_->WaitOne(&control_[j].in, j, k + 1, &deadline);
            !s.ok()) {
          return s;
        }
        if (off == 0) {
          if (absl::Status s = sync_->CheckDescriptor(k, j); !s.ok()) return s;
        }
        if (len > 0) {
          std::memcpy(out + (j * count + off) * elem, Slot(k, j), len * elem);
        }
      }
      Finish(k);
      off += len;
    } while (off < count);
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             DataType type, ReduceOp op,
                             uint32_t tag) override {
    const size_t elem = SizeOf(type);
    const char* in = static_cast<const char*>(input);
    char* out = static_cast<char*>(output);
    if (size_ == 1) {
      if (out != in && count > 0) std::memmove(out, in, count * elem);
      return absl::OkStatus();
    }
    if (absl::Status s = sync_->CheckAborted(); !s.ok()) return s;
    // A step takes `per_block` elements of every rank's block; the slot
    // holds them at block * per_block.
    const size_t align = std::max<size_t>(1, 64 / elem);
    size_t per_block = slot_bytes_ / elem / size_;
    if (per_block > align) per_block = per_block / align * align;
    per_block = std::max<size_t>(1, per_block);
    size_t off = 0;
    do {
      const size_t len = std::min(per_block, count - off);
      const uint32_t k = step_;
      if (absl::Status s = Acquire(k); !s.ok()) return s;
      char* mine = Slot(k, rank_);
      for (int s = 0; s < size_ && len > 0; ++s) {
        if (s == rank_) continue;
        std::memcpy(mine + s * per_block * elem, in + (s * count + off) * elem,
                    len * elem);
      }
      if (off == 0) {
        sync_->Describe(k, OpKind::kReduceScatter, type, op, -1, count);
      }
      Rendezvous::Publish(&control_[rank_].in, k + 1);
      if (absl::Status s =
              sync_->WaitAll(&RankControl::in, k + 1, off == 0 ? k : -1);
          !s.ok()) {
        return s;
      }
      if (len > 0) {
        const size_t at = rank_ * per_block * elem;
        ReduceShare(type, op, out + off * elem,
                    in + (rank_ * count + off) * elem, k, at, len, nullptr);
      }
      Finish(k);
      off += len;
    } while (off < count);
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, DataType type, int root,
                         uint32_t tag) override {
    if (root < 0 || root >= size_) return BadRoot(root);
    if (size_ == 1) return absl::OkStatus();
    if (absl::Status s = sync_->CheckAborted(); !s.ok()) return s;
    const size_t elem = SizeOf(type);
    char* buf = static_cast<char*>(data);
    // Only the root writes: a step may use the whole buffer (every slot).
    const size_t chunk = std::max<size_t>(1, size_ * slot_bytes_ / elem);
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, count - off);
      const uint32_t k = step_;
      if (absl::Status s = Acquire(k); !s.ok()) return s;
      if (rank_ == root && len > 0) {
        std::memcpy(Slot(k, 0), buf + off * elem, len * elem);
      }
      if (off == 0) {
        sync_->Describe(k, OpKind::kBroadcast, type, ReduceOp::kSum, root,
                        count);
      }
      Rendezvous::Publish(&control_[rank_].in, k + 1);
      if (rank_ != root) {
        Rendezvous::Deadline deadline = sync_->StartWait();
        if (absl::Status s =
                sync_->WaitOne(&control_[root].in, root, k + 1, &deadline);
            !s.ok()) {
          return s;
        }
        if (off == 0) {
          if (absl::Status s = sync_->CheckDescriptor(k, root); !s.ok())
            return s;
        }
        if (len > 0) std::memcpy(buf + off * elem, Slot(k, 0), len * elem);
      }
      Finish(k);
      off += len;
    } while (off < count);
    return absl::OkStatus();
  }

  absl::Status Barrier(uint32_t tag) override {
    if (size_ == 1) return absl::OkStatus();
    if (absl::Status s = sync_->CheckAborted(); !s.ok()) return s;
    const uint32_t k = step_;
    if (absl::Status s = Acquire(k); !s.ok()) return s;
    sync_->Describe(k, OpKind::kBarrier, DataType::kFloat32, ReduceOp::kSum, -1,
                    0);
    Rendezvous::Publish(&control_[rank_].in, k + 1);
    if (absl::Status s = sync_->WaitAll(&RankControl::in, k + 1, k); !s.ok()) {
      return s;
    }
    Finish(k);
    return absl::OkStatus();
  }

  void Abort(const absl::Status& status) override {
    if (header_ != nullptr) sync_->Abort(status);
  }

 private:
  char* Slot(uint32_t step, int rank) const {
    return data_ +
           ((step % kPipelineDepth) * size_ + static_cast<size_t>(rank)) *
               slot_bytes_;
  }

  absl::Status BadRoot(int root) const {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is out of range for ", size_, " ranks"));
  }

  // The step is over for this rank: it read everything it needed.
  void Finish(uint32_t step) {
    Rendezvous::Publish(&control_[rank_].reduced, step + 1);
    Rendezvous::Publish(&control_[rank_].done, step + 1);
    ++step_;
  }

  // Buffer step % depth is free: every rank finished step - depth.
  absl::Status Acquire(uint32_t step) {
    return sync_->WaitAll(&RankControl::done, step + 1 - kPipelineDepth, -1);
  }

  // dst = own op (the peers' slots of step k at slot_offset, in rank
  // order), and a copy into `copy` when it is not null. Block by block, so
  // that the repeated passes over dst stay in L1 and each input crosses the
  // memory hierarchy once.
  void ReduceShare(DataType type, ReduceOp op, char* dst, const char* own,
                   uint32_t k, size_t slot_offset, size_t count, char* copy) {
    const size_t elem = SizeOf(type);
    const size_t block = std::max<size_t>(1, kReduceBlockBytes / elem);
    for (size_t b = 0; b < count; b += block) {
      const size_t m = std::min(block, count - b);
      const size_t at = b * elem;
      bool first = true;
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        const char* peer = Slot(k, j) + slot_offset + at;
        if (first) {
          ReduceTwo(type, op, dst + at, own + at, peer, m);
          first = false;
        } else {
          ReduceInto(type, op, dst + at, peer, m);
        }
      }
      if (copy != nullptr) std::memcpy(copy + at, dst + at, m * elem);
    }
  }

  // All-reduce (root < 0) or reduce to root, pipelined over chunks.
  absl::Status ReduceImpl(OpKind kind, char* buf, size_t count, DataType type,
                          ReduceOp op, int root) {
    if (size_ == 1) return absl::OkStatus();
    if (absl::Status s = sync_->CheckAborted(); !s.ok()) return s;
    const size_t elem = SizeOf(type);
    const size_t bytes = count * elem;
    if (bytes <= kSmallBytes && bytes <= slot_bytes_) {
      return SmallReduce(kind, buf, count, type, op, root);
    }
    const size_t chunk = slot_bytes_ / elem;
    for (size_t off = 0; off < count; off += chunk) {
      const size_t len = std::min(chunk, count - off);
      if (absl::Status s = ReduceStep(kind, buf + off * elem, len, count, type,
                                      op, root, off == 0);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // One step: every rank puts the others' shares in its slot, reduces its
  // own share straight from its buffer and the peers' slots, publishes the
  // result in its slot, and copies the peers' results out.
  absl::Status ReduceStep(OpKind kind, char* buf, size_t len, size_t count,
                          DataType type, ReduceOp op, int root, bool first) {
    const size_t elem = SizeOf(type);
    const uint32_t k = step_;
    const Shares shares = SharesOf(len, size_, elem);
    if (absl::Status s = Acquire(k); !s.ok()) return s;
    char* mine = Slot(k, rank_);
    for (int s = 0; s < size_; ++s) {
      if (s == rank_ || shares.End(s) == shares.Begin(s)) continue;
      std::memcpy(mine + shares.Begin(s) * elem, buf + shares.Begin(s) * elem,
                  (shares.End(s) - shares.Begin(s)) * elem);
    }
    if (first) sync_->Describe(k, kind, type, op, root, count);
    Rendezvous::Publish(&control_[rank_].in, k + 1);
    if (absl::Status s = sync_->WaitAll(&RankControl::in, k + 1,
                                        first ? static_cast<int64_t>(k) : -1);
        !s.ok()) {
      return s;
    }
    const bool wants_result = root < 0 || root == rank_;
    const size_t begin = shares.Begin(rank_);
    const size_t n = shares.End(rank_) - begin;
    if (n > 0) {
      const size_t at = begin * elem;
      // Computed where it is needed first: this rank's buffer when it wants
      // the result, else the slot the root reads.
      char* dst = wants_result ? buf + at : mine + at;
      ReduceShare(type, op, dst, buf + at, k, at, n,
                  wants_result && root < 0 ? mine + at : nullptr);
    }
    Rendezvous::Publish(&control_[rank_].reduced, k + 1);
    if (wants_result) {
      Rendezvous::Deadline deadline = sync_->StartWait();
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        if (absl::Status s =
                sync_->WaitOne(&control_[j].reduced, j, k + 1, &deadline);
            !s.ok()) {
          return s;
        }
        const size_t b = shares.Begin(j);
        const size_t e = shares.End(j);
        if (e > b) {
          std::memcpy(buf + b * elem, Slot(k, j) + b * elem, (e - b) * elem);
        }
      }
    }
    Rendezvous::Publish(&control_[rank_].done, k + 1);
    ++step_;
    return absl::OkStatus();
  }

  // One step for small messages: every rank copies its data to its slot
  // and reduces all slots in rank order (bitwise the same on every rank).
  absl::Status SmallReduce(OpKind kind, char* buf, size_t count, DataType type,
                           ReduceOp op, int root) {
    const size_t elem = SizeOf(type);
    const uint32_t k = step_;
    if (absl::Status s = Acquire(k); !s.ok()) return s;
    if (count > 0) std::memcpy(Slot(k, rank_), buf, count * elem);
    sync_->Describe(k, kind, type, op, root, count);
    Rendezvous::Publish(&control_[rank_].in, k + 1);
    if (absl::Status s = sync_->WaitAll(&RankControl::in, k + 1, k); !s.ok()) {
      return s;
    }
    if (count > 0 && (root < 0 || root == rank_)) {
      ReduceTwo(type, op, buf, Slot(k, 0), Slot(k, 1), count);
      for (int j = 2; j < size_; ++j) {
        ReduceInto(type, op, buf, Slot(k, j), count);
      }
    }
    Finish(k);
    return absl::OkStatus();
  }

  const TransportOptions options_;
  const int size_;
  const int rank_;
  const Segment segment_;  // unmapped when size_ == 1
  Header* header_ = nullptr;
  RankControl* control_ = nullptr;
  char* data_ = nullptr;
  size_t slot_bytes_ = 0;
  std::optional<Rendezvous> sync_;  // when mapped
  uint32_t step_ = 0;               // the same on every rank between operations
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryTransport>>
SharedMemoryTransport::Create(const TransportOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " of ", options.size, " is out of range"));
  }
  if (options.size == 1) {
    return std::unique_ptr<SharedMemoryTransport>(
        new ShmTransport(options, Segment()));
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(
        "the shared-memory transport needs a store");
  }
  absl::StatusOr<Segment> segment = Segment::Attach(options);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<SharedMemoryTransport>(
      new ShmTransport(options, *std::move(segment)));
}

absl::StatusOr<std::unique_ptr<Transport>> CreateSharedMemoryTransport(
    const TransportOptions& options) {
  auto transport = SharedMemoryTransport::Create(options);
  if (!transport.ok()) return transport.status();
  return std::unique_ptr<Transport>(std::move(*transport));
}

}  // namespace shoal::collective::internal
