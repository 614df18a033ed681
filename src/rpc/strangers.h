// Connections that a server has accepted and that have not presented the
// cluster token yet: strangers. Each holds a seat (a file descriptor and a
// few buffers) until it says a valid hello, is refused, or runs out of time
// to say it.
//
// Seats are bounded per peer address and in all. When a new connection would
// go over a bound, the stranger seated longest (of that address, or of all)
// gives its seat up. A refusal at the bound instead let one peer that keeps
// its seats full (reopening each connection it loses, no token needed) lock
// every new client out for as long as it kept at it; now it only pushes out
// its own older connections, and a client is never turned away because idle
// strangers came before it. The per-address bound keeps one address from
// taking every seat from the others. Every loopback address (127.0.0.0/8) is
// one peer, as they are all this host. The clients of a cluster on loopback
// (the CLI, drivers, the head node's agent) share that address's seats with
// any stranger on the host, so loopback's share is larger: the more seats, the
// longer a client's new connection keeps its own while strangers pour in
// behind it, and it needs to keep it only until its hello arrives: a server
// reads a new connection at once and a stranger once more before it drops it
// (a hello that has arrived is served, never dropped), and takes a bounded
// batch of new connections at a time, so that hellos are read between
// batches.
//
// Threading: not thread-safe; a Server keeps these on its loop.
#ifndef SHOAL_RPC_STRANGERS_H_
#define SHOAL_RPC_STRANGERS_H_

#include <netinet/in.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace shoal::rpc {

// What became of a stranger that did not get in.
enum class StrangerFate {
  kMadeRoomForSamePeer,  // dropped for a newer one from its address
  kMadeRoom,             // dropped for a newer one: every seat was taken
  kMadeRoomForFds,       // dropped: the process was out of descriptors
  kNoHelloInTime,        // said no (complete) hello in time
  kNotShoal,             // did not speak the Shoal protocol
  kWrongToken,           // wrong or missing cluster token
  kTlsFailed,            // TLS was missing, unwanted or failed
};
inline constexpr int kNumStrangerFates = 7;

class StrangerSeats {
 public:
  struct Limits {
    size_t per_peer = 64;   // per remote address
    size_t loopback = 512;  // for 127.0.0.0/8, all of it
    size_t total = 1024;
  };
  // Which stranger gives up its seat, and for what.
  struct Eviction {
    uint64_t id;
    StrangerFate fate;  // kMadeRoomForSamePeer or kMadeRoom
  };

  // REQUIRES: every limit is at least 1.
  explicit StrangerSeats(Limits limits);

  // The address whose seats a connection from `addr` takes: its IP, with
  // every loopback address as "127.0.0.0/8".
  static std::string PeerOf(const sockaddr_in& addr);
  static constexpr char kLoopback[] = "127.0.0.0/8";

  // The stranger that must give up its seat before one more from `peer` may
  // sit: the oldest of `peer` when `peer` holds its share, else the oldest
  // of all when every seat is taken; nullopt when there is room.
  // PeerOf's loopback name has the loopback share, others per_peer.
  std::optional<Eviction> ToMakeRoomFor(const std::string& peer) const;
  // Seats connection `id` from `peer`, seated at `now_us`.
  // REQUIRES: `id` is greater than every id seated before (ids are handed
  // out in the order connections are accepted, so the smallest is the
  // oldest), and ToMakeRoomFor(peer) is nullopt.
  void Seat(uint64_t id, const std::string& peer, int64_t now_us);
  // Frees the seat of `id` (it authenticated, or closed); nothing if it
  // holds none.
  void Leave(uint64_t id);
  void Clear();

  // The stranger seated longest, and when it sat; nullopt when none.
  std::optional<std::pair<uint64_t, int64_t>> Oldest() const;
  bool Holds(uint64_t id) const { return seats_.count(id) != 0; }
  size_t size() const { return seats_.size(); }
  size_t SeatedFrom(const std::string& peer) const;
  const Limits& limits() const { return limits_; }

 private:
  struct Held {
    std::string peer;
    int64_t since_us;
  };
  const Limits limits_;
  std::map<uint64_t, Held> seats_;  // by id: oldest first
  std::unordered_map<std::string, std::set<uint64_t>> by_peer_;
};

// What became of strangers, told in the log without a line per connection
// (a peer that opens thousands of connections must not flood the log): the
// first at once in its own words, then at most a line per interval that
// counts them by fate and quotes the latest.
class StrangerLog {
 public:
  explicit StrangerLog(int64_t interval_us) : interval_us_(interval_us) {}

  // Counts a stranger's fate; `what` says it in full ("refused
  // 10.0.0.5:41000: wrong or missing cluster token"). Returns the line to
  // log now, if one is due: `what` itself when it is all there is to say,
  // else a summary of everything counted since the last line.
  std::optional<std::string> Note(StrangerFate fate, std::string what,
                                  int64_t now_us);
  // The summary of what was counted and not said yet; nullopt when nothing
  // was. For a timer at next_line_us(), so that the end of a burst is said.
  std::optional<std::string> Flush(int64_t now_us);
  // Whether something counted waits to be said.
  bool pending() const { return counted_ > 0; }
  // When the next line may be logged.
  int64_t next_line_us() const { return last_line_us_ + interval_us_; }

 private:
  std::string Line(int64_t now_us);

  const int64_t interval_us_;
  bool said_anything_ = false;
  int64_t last_line_us_ = 0;
  int64_t counted_ = 0;
  std::array<int64_t, kNumStrangerFates> by_fate_{};
  std::string latest_;
};

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_STRANGERS_H_
