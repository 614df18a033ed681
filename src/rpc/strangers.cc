#include "rpc/strangers.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shoal::rpc {

StrangerSeats::StrangerSeats(Limits limits) : limits_(limits) {
  SHOAL_CHECK(limits_.per_peer >= 1 && limits_.loopback >= 1 &&
              limits_.total >= 1)
      << "stranger seat limits must be at least 1";
}

std::string StrangerSeats::PeerOf(const sockaddr_in& addr) {
  if ((ntohl(addr.sin_addr.s_addr) >> 24) == 127) return kLoopback;
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return buf;
}

std::optional<StrangerSeats::Eviction> StrangerSeats::ToMakeRoomFor(
    const std::string& peer) const {
  const size_t share = peer == kLoopback ? limits_.loopback : limits_.per_peer;
  auto it = by_peer_.find(peer);
  if (it != by_peer_.end() && it->second.size() >= share) {
    return Eviction{*it->second.begin(), StrangerFate::kMadeRoomForSamePeer};
  }
  if (seats_.size() >= limits_.total) {
    return Eviction{seats_.begin()->first, StrangerFate::kMadeRoom};
  }
  return std::nullopt;
}

void StrangerSeats::Seat(uint64_t id, const std::string& peer, int64_t now_us) {
  SHOAL_CHECK(seats_.empty() || seats_.rbegin()->first < id)
      << "strangers must be seated in the order they were accepted";
  seats_.emplace(id, Held{peer, now_us});
  by_peer_[peer].insert(id);
}

void StrangerSeats::Leave(uint64_t id) {
  auto it = seats_.find(id);
  if (it == seats_.end()) return;
  auto peer = by_peer_.find(it->second.peer);
  peer->second.erase(id);
  if (peer->second.empty()) by_peer_.erase(peer);
  seats_.erase(it);
}

void StrangerSeats::Clear() {
  seats_.clear();
  by_peer_.clear();
}

std::optional<std::pair<uint64_t, int64_t>> StrangerSeats::Oldest() const {
  if (seats_.empty()) return std::nullopt;
  return std::make_pair(seats_.begin()->first, seats_.begin()->second.since_us);
}

size_t StrangerSeats::SeatedFrom(const std::string& peer) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? 0 : it->second.size();
}

namespace {

const char* FateWords(StrangerFate fate) {
  switch (fate) {
    case StrangerFate::kMadeRoomForSamePeer:
      return "dropped for newer ones from the same address";
    case StrangerFate::kMadeRoom:
      return "dropped for newer ones (every seat taken)";
    case StrangerFate::kMadeRoomForFds:
      return "dropped for want of file descriptors";
    case StrangerFate::kNoHelloInTime:
      return "sent no hello in time";
    case StrangerFate::kNotShoal:
      return "did not speak the Shoal protocol";
    case StrangerFate::kWrongToken:
      return "gave a wrong or missing cluster token";
    case StrangerFate::kTlsFailed:
      return "failed TLS";
  }
  return "closed";
}

}  // namespace

std::optional<std::string> StrangerLog::Note(StrangerFate fate,
                                             std::string what, int64_t now_us) {
  ++counted_;
  ++by_fate_[static_cast<int>(fate)];
  latest_ = std::move(what);
  if (said_anything_ && now_us < next_line_us()) return std::nullopt;
  return Line(now_us);
}

std::optional<std::string> StrangerLog::Flush(int64_t now_us) {
  if (counted_ == 0) return std::nullopt;
  return Line(now_us);
}

std::string StrangerLog::Line(int64_t now_us) {
  std::string line;
  if (counted_ == 1) {
    line = std::move(latest_);
  } else {
    line = absl::StrCat(counted_,
                        " connections that had not presented the cluster "
                        "token were closed");
    if (said_anything_) {
      absl::StrAppend(&line, " in the last ",
                      (now_us - last_line_us_ + 500000) / 1000000, " s");
    }
    const char* sep = ": ";
    for (int f = 0; f < kNumStrangerFates; ++f) {
      if (by_fate_[f] == 0) continue;
      absl::StrAppend(&line, sep, by_fate_[f], " ",
                      FateWords(static_cast<StrangerFate>(f)));
      sep = ", ";
    }
    absl::StrAppend(&line, "; the latest: ", latest_);
  }
  said_anything_ = true;
  last_line_us_ = now_us;
  counted_ = 0;
  by_fate_.fill(0);
  latest_.clear();
  return line;
}

}  // namespace shoal::rpc
