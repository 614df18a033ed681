#include "rpc/strangers.h"

#include <arpa/inet.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

sockaddr_in Addr(const char* ip) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &addr.sin_addr);
  return addr;
}

TEST(StrangerSeatsTest, EveryLoopbackAddressIsOnePeer) {
  EXPECT_EQ(StrangerSeats::PeerOf(Addr("127.0.0.1")), "127.0.0.0/8");
  EXPECT_EQ(StrangerSeats::PeerOf(Addr("127.4.5.6")), "127.0.0.0/8");
  EXPECT_EQ(StrangerSeats::PeerOf(Addr("10.1.2.3")), "10.1.2.3");
  EXPECT_EQ(StrangerSeats::PeerOf(Addr("128.0.0.1")), "128.0.0.1");
}

TEST(StrangerSeatsTest, ThereIsRoomUnderBothLimits) {
  StrangerSeats seats({.per_peer = 2, .total = 3});
  EXPECT_EQ(seats.ToMakeRoomFor("a"), std::nullopt);
  seats.Seat(1, "a", 100);
  EXPECT_EQ(seats.ToMakeRoomFor("a"), std::nullopt);
  seats.Seat(2, "b", 200);
  EXPECT_EQ(seats.size(), 2u);
  EXPECT_EQ(seats.SeatedFrom("a"), 1u);
  EXPECT_EQ(seats.SeatedFrom("c"), 0u);
}

TEST(StrangerSeatsTest, APeerAtItsShareGivesUpItsOwnOldest) {
  StrangerSeats seats({.per_peer = 2, .total = 10});
  seats.Seat(1, "other", 0);
  seats.Seat(2, "a", 10);
  seats.Seat(3, "a", 20);
  auto eviction = seats.ToMakeRoomFor("a");
  ASSERT_TRUE(eviction.has_value());
  EXPECT_EQ(eviction->id, 2u);  // not 1: that one is another address's
  EXPECT_EQ(eviction->fate, StrangerFate::kMadeRoomForSamePeer);
  // Another address still has room.
  EXPECT_EQ(seats.ToMakeRoomFor("b"), std::nullopt);
}

TEST(StrangerSeatsTest, WhenEverySeatIsTakenTheOldestOfAllGivesWay) {
  StrangerSeats seats({.per_peer = 5, .total = 3});
  seats.Seat(1, "a", 0);
  seats.Seat(2, "b", 10);
  seats.Seat(3, "c", 20);
  auto eviction = seats.ToMakeRoomFor("d");
  ASSERT_TRUE(eviction.has_value());
  EXPECT_EQ(eviction->id, 1u);
  EXPECT_EQ(eviction->fate, StrangerFate::kMadeRoom);
  seats.Leave(1);
  EXPECT_EQ(seats.ToMakeRoomFor("d"), std::nullopt);
  seats.Seat(4, "d", 30);
  EXPECT_EQ(seats.ToMakeRoomFor("a")->id, 2u);
}

TEST(StrangerSeatsTest, LeavingFreesTheSeatOnce) {
  StrangerSeats seats({.per_peer = 1, .total = 4});
  seats.Seat(7, "a", 5);
  EXPECT_TRUE(seats.Holds(7));
  EXPECT_TRUE(seats.ToMakeRoomFor("a").has_value());
  seats.Leave(7);
  seats.Leave(7);  // closed after it authenticated: nothing more to free
  seats.Leave(99);
  EXPECT_FALSE(seats.Holds(7));
  EXPECT_EQ(seats.size(), 0u);
  EXPECT_EQ(seats.SeatedFrom("a"), 0u);
  EXPECT_EQ(seats.ToMakeRoomFor("a"), std::nullopt);
  EXPECT_EQ(seats.Oldest(), std::nullopt);
}

TEST(StrangerSeatsTest, OldestIsTheFirstSeatedStillThere) {
  StrangerSeats seats({.per_peer = 8, .total = 8});
  seats.Seat(3, "a", 300);
  seats.Seat(4, "b", 400);
  seats.Seat(9, "a", 900);
  EXPECT_THAT(seats.Oldest(), Optional(std::make_pair(uint64_t{3}, 300l)));
  seats.Leave(3);
  EXPECT_THAT(seats.Oldest(), Optional(std::make_pair(uint64_t{4}, 400l)));
  seats.Clear();
  EXPECT_EQ(seats.Oldest(), std::nullopt);
  EXPECT_EQ(seats.SeatedFrom("a"), 0u);
}

TEST(StrangerSeatsTest, LoopbackHasAShareOfItsOwn) {
  StrangerSeats seats({.per_peer = 1, .loopback = 3, .total = 10});
  seats.Seat(1, "10.0.0.1", 0);
  EXPECT_TRUE(seats.ToMakeRoomFor("10.0.0.1").has_value());
  for (uint64_t id = 2; id <= 4; ++id) {
    EXPECT_EQ(seats.ToMakeRoomFor(StrangerSeats::kLoopback), std::nullopt);
    seats.Seat(id, StrangerSeats::kLoopback, 0);
  }
  auto eviction = seats.ToMakeRoomFor(StrangerSeats::kLoopback);
  ASSERT_TRUE(eviction.has_value());
  EXPECT_EQ(eviction->id, 2u);
  EXPECT_EQ(eviction->fate, StrangerFate::kMadeRoomForSamePeer);
}

TEST(StrangerSeatsTest, OneLoopbackFloodOnlyPushesOutItsOwn) {
  // 3,000 connections from loopback against 512 for loopback and 1,024 in
  // all: a remote agent that came first keeps its seat, and loopback never
  // holds more than its share.
  StrangerSeats seats({.per_peer = 64, .loopback = 512, .total = 1024});
  seats.Seat(1, "10.0.0.2", 0);
  uint64_t dropped = 0;
  for (uint64_t id = 2; id < 3002; ++id) {
    while (auto eviction = seats.ToMakeRoomFor("127.0.0.0/8")) {
      EXPECT_EQ(eviction->fate, StrangerFate::kMadeRoomForSamePeer);
      seats.Leave(eviction->id);
      ++dropped;
    }
    seats.Seat(id, "127.0.0.0/8", static_cast<int64_t>(id));
  }
  EXPECT_EQ(seats.SeatedFrom("127.0.0.0/8"), 512u);
  EXPECT_EQ(dropped, 3000u - 512u);
  EXPECT_TRUE(seats.Holds(1));
  EXPECT_TRUE(seats.Holds(3001));  // the newest got in
}

constexpr int64_t kSecond = 1000 * 1000;

TEST(StrangerLogTest, TheFirstIsSaidAtOnceInItsOwnWords) {
  StrangerLog log(10 * kSecond);
  EXPECT_FALSE(log.pending());
  EXPECT_THAT(log.Note(StrangerFate::kWrongToken, "refused x: wrong token",
                       5 * kSecond),
              Optional(std::string("refused x: wrong token")));
  EXPECT_FALSE(log.pending());
  EXPECT_EQ(log.Flush(6 * kSecond), std::nullopt);
}

TEST(StrangerLogTest, ABurstIsOneLinePerInterval) {
  StrangerLog log(10 * kSecond);
  ASSERT_TRUE(log.Note(StrangerFate::kNotShoal, "first", 0).has_value());
  int lines = 0;
  for (int i = 0; i < 1000; ++i) {
    if (log.Note(i % 2 ? StrangerFate::kMadeRoomForSamePeer
                       : StrangerFate::kNoHelloInTime,
                 "conn " + std::to_string(i), i * 1000)) {
      ++lines;
    }
  }
  EXPECT_EQ(lines, 0);  // all within the first second
  EXPECT_TRUE(log.pending());
  EXPECT_EQ(log.next_line_us(), 10 * kSecond);
  auto line = log.Flush(10 * kSecond);
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("1000 connections that had not presented the "
                               "cluster token were closed in the last 10 s"));
  EXPECT_THAT(*line,
              HasSubstr("500 dropped for newer ones from the same address"));
  EXPECT_THAT(*line, HasSubstr("500 sent no hello in time"));
  EXPECT_THAT(*line, HasSubstr("the latest: conn 999"));
  EXPECT_FALSE(log.pending());
  EXPECT_EQ(log.Flush(11 * kSecond), std::nullopt);
}

TEST(StrangerLogTest, AfterAQuietIntervalTheNextIsSaidAtOnce) {
  StrangerLog log(10 * kSecond);
  ASSERT_TRUE(log.Note(StrangerFate::kNotShoal, "a", 0).has_value());
  EXPECT_EQ(log.Note(StrangerFate::kNotShoal, "b", kSecond), std::nullopt);
  // Due again: what waited is said with the new one.
  auto line = log.Note(StrangerFate::kWrongToken, "c", 30 * kSecond);
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("2 connections"));
  EXPECT_THAT(*line, HasSubstr("1 did not speak the Shoal protocol"));
  EXPECT_THAT(*line, HasSubstr("1 gave a wrong or missing cluster token"));
  EXPECT_THAT(*line, HasSubstr("the latest: c"));
  EXPECT_THAT(log.Note(StrangerFate::kWrongToken, "d", 41 * kSecond),
              Optional(std::string("d")));
}

}  // namespace
}  // namespace shoal::rpc
