// The Gloo transport: every pair of ranks is a TCP connection (Gloo's tcp
// device), and the collectives are Gloo's own algorithms: ring all-reduce
// (bandwidth-optimal for the large buffers that cross hosts), ring
// all-gather, broadcast and barrier. This Gloo version has no reduce-scatter
// for unbound buffers, so ReduceScatter is a ring over Gloo's send/recv that
// moves (n-1)/n of the input per rank, half of what all-reduce + slice would.
//
// Gloo reports failures by throwing (IoException when a peer's connection
// closes or an operation times out, EnforceNotMet for broken invariants).
// Every exception stops here and becomes a Status naming the peers whose
// connection broke, else the ranks this rank was waiting for. After a
// failure the connections are in an unknown state, so the transport keeps
// returning the first failure.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "collective/reduce.h"
#include "collective/transport.h"
#include "common/process.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/context.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collective::internal {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Gloo's slots are (prefix << 56 | tag << 24) + step; Gloo's algorithms use
// prefixes 0x01..0x08, so ours cannot collide with theirs.
constexpr uint64_t kReduceScatterSlotPrefix = 0x40;

uint64_t ReduceScatterSlot(uint32_t tag) {
  return (kReduceScatterSlotPrefix << 56) | (static_cast<uint64_t>(tag) << 24);
}
// Where the probes for failed connections go (never received).
constexpr uint64_t kProbeSlot = uint64_t{0x41} << 56;

// Gloo's rendezvous store over Shoal's, under the transport's key prefix.
// Values are base64 because Gloo's are binary socket addresses and a Store
// (the head's KV store) holds text. Keys are written once per group
// incarnation, so what was read once is cached: Gloo reads each key after
// waiting for it.
//
// Not thread-safe; used by the thread that creates the transport.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(collective::Store* store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->Set(prefix_ + key, absl::Base64Escape(absl::string_view(
                                   data.data(), data.size())));
  }

  std::vector<char> get(const std::string& key) override {
    return Fetch(key, timeout_);
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }

  void wait(const std::vector<std::string>& keys,
            const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const std::string& key : keys) {
      auto left =
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      Fetch(key, std::max(left, milliseconds(0)));
    }
  }

  // The key being waited for when the store last threw, if any.
  const std::string& pending_key() const { return pending_key_; }

  // Of `keys`, those not in the store now.
  std::vector<std::string> Missing(const std::vector<std::string>& keys) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      try {
        Fetch(key, milliseconds(0));
      } catch (...) {
        missing.push_back(key);
      }
    }
    return missing;
  }

 private:
  std::vector<char> Fetch(const std::string& key, milliseconds timeout) {
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    pending_key_ = key;
    std::string encoded = store_->Get(prefix_ + key, timeout);
    pending_key_.clear();
    std::string decoded;
    if (!absl::Base64Unescape(encoded, &decoded)) {
      throw gloo::Exception(absl::StrCat("rendezvous key ", prefix_, key,
                                         " does not hold Gloo's data; is "
                                         "another program using this prefix?"));
    }
    return cache_
        .emplace(key, std::vector<char>(decoded.begin(), decoded.end()))
        .first->second;
  }

  collective::Store* store_;  // not owned
  const std::string prefix_;
  const milliseconds timeout_;
  std::map<std::string, std::vector<char>> cache_;
  std::string pending_key_;
};

// Calls fn(T{}) with the C++ type that stores `type`'s elements.
template <typename Fn>
decltype(auto) WithElementType(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32:
      return fn(float{});
    case DataType::kBFloat16:
      return fn(uint16_t{});
    case DataType::kFloat64:
      return fn(double{});
    case DataType::kInt32:
      return fn(int32_t{});
    case DataType::kInt64:
      break;
  }
  return fn(int64_t{});
}

using ReduceFunc = gloo::AllreduceOptions::Func;
using RawReduce = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFunc TypedReduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<RawReduce>(&gloo::sum<T>);
    case ReduceOp::kMax:
      return static_cast<RawReduce>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<RawReduce>(&gloo::min<T>);
    case ReduceOp::kProduct:
      break;
  }
  return static_cast<RawReduce>(&gloo::product<T>);
}

// Gloo's function reducing two buffers of `type` into a third.
ReduceFunc ReduceFor(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return TypedReduce<float>(op);
    case DataType::kFloat64:
      return TypedReduce<double>(op);
    case DataType::kInt32:
      return TypedReduce<int32_t>(op);
    case DataType::kInt64:
      return TypedReduce<int64_t>(op);
    case DataType::kBFloat16:
      break;
  }
  return [op](void* out, const void* a, const void* b, size_t n) {
    ReduceTwo(DataType::kBFloat16, op, out, a, b, n);
  };
}

// One rank's endpoint in a Gloo context. Used by one thread at a time.
class GlooTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> Create(
      const TransportOptions& options);

  absl::Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                         uint32_t tag) override;
  absl::Status AllGather(const void* input, void* output, size_t count,
                         DataType type, uint32_t tag) override;
  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             DataType type, ReduceOp op, uint32_t tag) override;
  absl::Status Broadcast(void* data, size_t count, DataType type, int root,
                         uint32_t tag) override;
  absl::Status Barrier(uint32_t tag) override;

 private:
  explicit GlooTransport(const TransportOptions& options) : options_(options) {}

  // Runs a Gloo call; turns whatever it throws into the transport's failure.
  template <typename Fn>
  absl::Status Run(absl::string_view what, Fn&& fn);
  absl::Status RingReduceScatter(const void* input, void* output, size_t count,
                                 DataType type, ReduceOp op, uint32_t tag);

  // The peers whose connection with this rank has failed.
  std::vector<int> BrokenPeers();
  // Tells the other ranks that this one is alive although its operation
  // failed; and `ranks` without those that said so.
  void SayAliveAfterFailure();
  std::vector<int> WithoutLiveRanks(std::vector<int> ranks) const;
  std::string AliveKey(int rank) const;

  const TransportOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  absl::Status failure_;  // sticky: the first failure
};

// A pair whose connection failed keeps its exception and throws it on every
// later use, so a one-byte send tells which pairs broke. Sends to healthy
// peers are never received; the transport is not used after a failure.
std::vector<int> GlooTransport::BrokenPeers() {
  std::vector<int> broken;
  char byte = 0;
  for (int rank : OtherRanks(options_)) {
    try {
      auto probe = context_->createUnboundBuffer(&byte, 1);
      probe->send(rank, kProbeSlot);
    } catch (...) {
      broken.push_back(rank);
    }
  }
  return broken;
}

// A rank whose operation fails abandons the operation's buffers, and Gloo
// then closes its connections to the ranks still sending to it; those see
// it as broken. So that they blame only the rank that died, a rank that
// survives a failure says so in the store before it looks for broken peers.
std::string GlooTransport::AliveKey(int rank) const {
  return absl::StrCat(options_.key_prefix, "/gloo/alive_after_failure/", rank);
}

void GlooTransport::SayAliveAfterFailure() {
  try {
    options_.store->Set(AliveKey(options_.rank), "");
  } catch (...) {
    // Only makes the others' messages less precise.
  }
}

std::vector<int> GlooTransport::WithoutLiveRanks(std::vector<int> ranks) const {
  std::vector<int> dead;
  for (int rank : ranks) {
    try {
      options_.store->Get(AliveKey(rank), milliseconds(0));
    } catch (...) {
      dead.push_back(rank);
    }
  }
  return dead;
}

template <typename Fn>
absl::Status GlooTransport::Run(absl::string_view what, Fn&& fn) {
  if (!failure_.ok()) return failure_;
  std::string message;
  bool io = false;
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    io = true;
    message = e.what();
  } catch (const gloo::EnforceNotMet& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  SayAliveAfterFailure();
  // Gloo closes a connection whose operation timed out, so a broken pair
  // means a dead peer only when nothing timed out.
  std::vector<int> peers = WithoutLiveRanks(BrokenPeers());
  const bool timed_out = absl::StrContains(message, "imed out") ||
                         absl::StrContains(message, "imeout");
  if (peers.empty() && (timed_out || io)) {
    peers = WithoutLiveRanks(OtherRanks(options_));
    if (peers.empty()) peers = OtherRanks(options_);
  }
  absl::StatusCode code = absl::StatusCode::kInternal;
  std::string summary = "Gloo failed";
  if (timed_out) {
    code = absl::StatusCode::kDeadlineExceeded;
    summary = absl::StrCat("no answer within ", options_.timeout.count(),
                           " ms from ", DescribeRanks(options_, peers));
  } else if (!peers.empty()) {
    code = absl::StatusCode::kUnavailable;
    summary =
        absl::StrCat("lost the connection to ", DescribeRanks(options_, peers),
                     " (its process exited or its host is unreachable)");
  }
  failure_ = RankFailure(
      code,
      absl::StrCat("Gloo ", what, " failed: ", summary, " [", message,
                   "]; the group cannot be used any more, create a new one"),
      peers);
  return failure_;
}

absl::StatusOr<std::unique_ptr<Transport>> GlooTransport::Create(
    const TransportOptions& options) {
  if (absl::Status valid = CheckRankAndStore(options, "Gloo"); !valid.ok()) {
    return valid;
  }
  IgnoreSigpipeUnlessHandled();
  auto transport = std::unique_ptr<GlooTransport>(new GlooTransport(options));
  GlooStore store(options.store, absl::StrCat(options.key_prefix, "/gloo/"),
                  options.timeout);
  bool device_ready = false;
  try {
    gloo::transport::tcp::attr attr;
    // Empty: Gloo resolves this host's name, as it does by default.
    attr.hostname = options.interface_address;
    transport->device_ = gloo::transport::tcp::CreateDevice(attr);
    device_ready = true;
    transport->context_ =
        std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    transport->context_->setTimeout(options.timeout);
    transport->context_->connectFullMesh(store, transport->device_);
  } catch (const std::exception& e) {
    if (!device_ready) {
      return absl::UnavailableError(absl::StrCat(
          "Gloo could not listen at address '", options.interface_address,
          "': ", e.what(),
          "; set GroupOptions::interface_address to an address of this host"));
    }
    // Gloo's rendezvous keys name ranks: each rank first writes "rank_<r>",
    // then "<r>" with its addresses. Name the ranks that never wrote the
    // first, else those that never wrote the second, else every other rank.
    const bool store_timed_out = !store.pending_key().empty();
    const bool timed_out = store_timed_out ||
                           absl::StrContains(e.what(), "imeout") ||
                           absl::StrContains(e.what(), "imed out");
    std::vector<int> waiting;
    for (absl::string_view key_prefix : {"rank_", ""}) {
      if (!store_timed_out || !waiting.empty()) break;
      std::vector<std::string> keys;
      for (int rank : OtherRanks(options)) {
        keys.push_back(absl::StrCat(key_prefix, rank));
      }
      for (const std::string& key : store.Missing(keys)) {
        int rank = 0;
        if (absl::SimpleAtoi(absl::StripPrefix(key, key_prefix), &rank)) {
          waiting.push_back(rank);
        }
      }
    }
    if (waiting.empty()) waiting = OtherRanks(options);
    return RankFailure(
        timed_out ? absl::StatusCode::kDeadlineExceeded
                  : absl::StatusCode::kUnavailable,
        absl::StrCat("Gloo rendezvous failed while waiting for ",
                     DescribeRanks(options, waiting), " (timeout ",
                     options.timeout.count(), " ms) [", e.what(),
                     "]; check that every rank created the group and can "
                     "reach this host"),
        waiting);
  } catch (...) {
    return absl::InternalError("Gloo rendezvous failed (unknown exception)");
  }
  return transport;
}

absl::Status GlooTransport::AllReduce(void* data, size_t count, DataType type,
                                      ReduceOp op, uint32_t tag) {
  if (count == 0 || options_.size == 1) return failure_;
  return Run("all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    WithElementType(type, [&](auto element) {
      using T = decltype(element);
      opts.setOutput(static_cast<T*>(data), count);
    });
    opts.setReduceFunction(ReduceFor(type, op));
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
  });
}

absl::Status GlooTransport::AllGather(const void* input, void* output,
                                      size_t count, DataType type,
                                      uint32_t tag) {
  if (count == 0) return failure_;
  if (options_.size == 1) {
    if (failure_.ok()) std::memmove(output, input, count * SizeOf(type));
    return failure_;
  }
  return Run("all-gather", [&] {
    gloo::AllgatherOptions opts(context_);
    WithElementType(type, [&](auto element) {
      using T = decltype(element);
      // Gloo only reads the input.
      opts.setInput(const_cast<T*>(static_cast<const T*>(input)), count);
      opts.setOutput(static_cast<T*>(output), count * options_.size);
    });
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::allgather(opts);
  });
}

absl::Status GlooTransport::ReduceScatter(const void* input, void* output,
                                          size_t count, DataType type,
                                          ReduceOp op, uint32_t tag) {
  if (count == 0) return failure_;
  if (options_.size == 1) {
    if (failure_.ok()) std::memmove(output, input, count * SizeOf(type));
    return failure_;
  }
  return Run("reduce-scatter", [&] {
    absl::Status status =
        RingReduceScatter(input, output, count, type, op, tag);
    if (!status.ok()) throw gloo::IoException(std::string(status.message()));
  });
}

// Step s (0 <= s < n-1): rank r sends its partial sum of block r-1-s to r+1
// and receives r-1's partial sum of block r-2-s, adding its own input. After
// n-1 steps the block received is r's own, reduced over every rank.
absl::Status GlooTransport::RingReduceScatter(const void* input, void* output,
                                              size_t count, DataType type,
                                              ReduceOp op, uint32_t tag) {
  const int n = options_.size;
  const int rank = options_.rank;
  const size_t bytes = count * SizeOf(type);
  const auto* in = static_cast<const char*>(input);
  const auto block = [&](int b) { return in + ((b % n + n) % n) * bytes; };
  const ReduceFunc reduce = ReduceFor(type, op);
  const size_t elements = count;
  const uint64_t slot = ReduceScatterSlot(tag);
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  const auto deadline = Clock::now() + options_.timeout;
  const auto left = [&] {
    return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                         deadline - Clock::now()));
  };

  // Partial sums: the one being sent and the one being received; both are
  // needed until the step's send completes.
  std::vector<char> sending(bytes);
  std::vector<char> receiving(bytes);
  auto send_buf = context_->createUnboundBuffer(sending.data(), bytes);
  auto recv_buf = context_->createUnboundBuffer(receiving.data(), bytes);
  // Step 0 sends this rank's own input; Gloo only reads a send buffer.
  auto first_buf =
      context_->createUnboundBuffer(const_cast<char*>(block(rank - 1)), bytes);
  for (int s = 0; s < n - 1; ++s) {
    recv_buf->recv(prev, slot);
    gloo::transport::UnboundBuffer* from =
        s == 0 ? first_buf.get() : send_buf.get();
    from->send(next, slot);
    if (!recv_buf->waitRecv(left()) || !from->waitSend(left())) {
      return absl::DeadlineExceededError("reduce-scatter was aborted");
    }
    char* into = s == n - 2 ? static_cast<char*>(output) : sending.data();
    reduce(into, block(rank - 2 - s), receiving.data(), elements);
  }
  return absl::OkStatus();
}

absl::Status GlooTransport::Broadcast(void* data, size_t count, DataType type,
                                      int root, uint32_t tag) {
  if (absl::Status valid = CheckBroadcastRoot(root, options_.size);
      !valid.ok()) {
    return valid;
  }
  if (count == 0 || options_.size == 1) return failure_;
  return Run("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    WithElementType(type, [&](auto element) {
      using T = decltype(element);
      opts.setOutput(static_cast<T*>(data), count);
    });
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
  });
}

absl::Status GlooTransport::Barrier(uint32_t tag) {
  if (options_.size == 1) return failure_;
  return Run("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateGlooTransport(
    const TransportOptions& options) {
  return GlooTransport::Create(options);
}

}  // namespace shoal::collective::internal
