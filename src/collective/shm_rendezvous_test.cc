#include "collective/shm_rendezvous.h"

#include <unistd.h>

#include <memory>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::collective::internal::shm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The control block of a group of `size`, in this process's memory: each
// rank is a Rendezvous over it, as ranks are over a mapped segment.
struct Block {
  explicit Block(int size) : control(new RankControl[size]()) {
    header = std::make_unique<Header>();
    for (int j = 0; j < size; ++j) control[j].pid.store(getpid());
  }
  std::unique_ptr<Header> header;
  std::unique_ptr<RankControl[]> control;
};

TransportOptions Options(int size, int rank, int timeout_ms) {
  TransportOptions options;
  options.size = size;
  options.rank = rank;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  return options;
}

TEST(RendezvousTest, WaitsForEveryPeerToPublish) {
  Block block(3);
  TransportOptions o0 = Options(3, 0, 30000), o1 = Options(3, 1, 30000),
                   o2 = Options(3, 2, 30000);
  Rendezvous r0(o0, block.header.get(), block.control.get());
  Rendezvous r1(o1, block.header.get(), block.control.get());
  Rendezvous r2(o2, block.header.get(), block.control.get());
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter(
      [&] { waited = r0.WaitAll(&RankControl::in, 1, /*describe_step=*/-1); });
  Rendezvous::Publish(&block.control[1].in, 1);
  Rendezvous::Publish(&block.control[2].in, 1);
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_TRUE(r1.CheckAborted().ok());
  EXPECT_TRUE(r2.CheckAborted().ok());
}

TEST(RendezvousTest, ATimeoutNamesTheRanksBehindAndFailsTheGroup) {
  Block block(3);
  TransportOptions o0 = Options(3, 0, 50), o1 = Options(3, 1, 50);
  Rendezvous r0(o0, block.header.get(), block.control.get());
  Rendezvous r1(o1, block.header.get(), block.control.get());
  Rendezvous::Publish(&block.control[1].in, 1);  // rank 2 never does
  absl::Status s = r0.WaitAll(&RankControl::in, 1, -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("rank 2"));
  EXPECT_THAT(s.message(), Not(HasSubstr("rank 1")));
  // Every rank now sees the same failure.
  absl::Status seen = r1.CheckAborted();
  EXPECT_EQ(seen.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(seen.message(), s.message());
}

TEST(RendezvousTest, TheFirstAbortWins) {
  Block block(2);
  TransportOptions o0 = Options(2, 0, 30000), o1 = Options(2, 1, 30000);
  Rendezvous r0(o0, block.header.get(), block.control.get());
  Rendezvous r1(o1, block.header.get(), block.control.get());
  r1.Abort(absl::CancelledError("the user stopped the job"));
  r0.Abort(absl::InternalError("a later failure"));
  absl::Status s = r0.CheckAborted();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("the user stopped the job"));
  // A waiter gives up at once instead of waiting out its timeout.
  EXPECT_EQ(r0.WaitAll(&RankControl::in, 1, -1).code(),
            absl::StatusCode::kCancelled);
}

TEST(RendezvousTest, MismatchedOperationsFailNamingBoth) {
  Block block(2);
  TransportOptions o0 = Options(2, 0, 30000), o1 = Options(2, 1, 30000);
  Rendezvous r0(o0, block.header.get(), block.control.get());
  Rendezvous r1(o1, block.header.get(), block.control.get());
  r0.Describe(0, OpKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1,
              1024);
  r1.Describe(0, OpKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 0,
              1024);
  Rendezvous::Publish(&block.control[1].in, 1);
  absl::Status s = r0.WaitAll(&RankControl::in, 1, /*describe_step=*/0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("different operations"));
}

TEST(RendezvousTest, APeerThatLeftFailsTheWait) {
  Block block(2);
  TransportOptions o0 = Options(2, 0, 30000);
  Rendezvous r0(o0, block.header.get(), block.control.get());
  block.control[1].left.store(1);
  absl::Status s = r0.WaitAll(&RankControl::in, 1, -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("left the group"));
}

}  // namespace
}  // namespace shoal::collective::internal::shm
