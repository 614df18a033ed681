// The head's copies of the workers' programs: sent once, again when the
// head may have lost them, on a thread of their own when a node lacks one.
#include "api/program_copies.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

// A head that counts sends and answers with the scripted outcome; `told`
// records what the parts heard.
struct Fakes {
  std::mutex mu;
  std::condition_variable cv;
  int sends = 0;
  bool fail = false;
  std::vector<absl::StatusOr<ProgramCopies::Hashes>> told;

  ProgramCopies::SendFn Send() {
    return [this]() -> absl::StatusOr<ProgramCopies::Hashes> {
      std::lock_guard<std::mutex> lock(mu);
      ++sends;
      if (fail) return absl::UnavailableError("the head is away");
      return ProgramCopies::Hashes{"p" + std::to_string(sends), "cpp"};
    };
  }
  ProgramCopies::TellFn Tell() {
    return [this](const absl::StatusOr<ProgramCopies::Hashes>& copies) {
      std::lock_guard<std::mutex> lock(mu);
      told.push_back(copies);
      cv.notify_all();
    };
  }
  void WaitTold(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return told.size() >= n; });
  }
};

TEST(ProgramCopiesTest, SentOnceThenTheKnownCopiesAreTold) {
  Fakes fakes;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  EXPECT_FALSE(copies.sent());
  ASSERT_TRUE(copies.SendOnce().ok());
  EXPECT_TRUE(copies.sent());
  EXPECT_EQ(copies.Known().program, "p1");
  EXPECT_EQ(copies.Known().cpp_program, "cpp");
  ASSERT_TRUE(copies.SendOnce().ok());
  EXPECT_EQ(fakes.sends, 1);
  ASSERT_EQ(fakes.told.size(), 2u);
  EXPECT_EQ(fakes.told[1]->program, "p1");
}

TEST(ProgramCopiesTest, AFailedSendIsToldAndTheNextCallerTriesAgain) {
  Fakes fakes;
  fakes.fail = true;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  EXPECT_TRUE(absl::IsUnavailable(copies.SendOnce()));
  EXPECT_FALSE(copies.sent());
  ASSERT_EQ(fakes.told.size(), 1u);
  EXPECT_FALSE(fakes.told[0].ok());
  fakes.fail = false;
  ASSERT_TRUE(copies.SendOnce().ok());
  EXPECT_EQ(fakes.sends, 2);
  EXPECT_EQ(copies.Known().program, "p2");
}

TEST(ProgramCopiesTest, AWorkerAdoptsItsDriversCopyAndNeverSends) {
  Fakes fakes;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  copies.Adopt("driver-copy");
  EXPECT_TRUE(copies.sent());
  ASSERT_TRUE(copies.SendOnce().ok());
  EXPECT_EQ(fakes.sends, 0);
  EXPECT_EQ(copies.Known().program, "driver-copy");
}

TEST(ProgramCopiesTest, AWantedCopyIsSentOnAThreadOfItsOwn) {
  Fakes fakes;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  copies.Wanted();
  fakes.WaitTold(1);
  copies.Shutdown();
  EXPECT_EQ(fakes.sends, 1);
  EXPECT_TRUE(copies.sent());
  // Wished again once sent: the known copies are told, nothing is sent.
  ProgramCopies again(fakes.Send(), fakes.Tell());
  again.Adopt("x");
  again.Wanted();
  fakes.WaitTold(2);
  again.Shutdown();
  EXPECT_EQ(fakes.sends, 1);
}

TEST(ProgramCopiesTest, SendAgainOnlyWhatWasSent) {
  Fakes fakes;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  copies.SendAgain();  // never sent: nothing
  copies.Shutdown();
  EXPECT_EQ(fakes.sends, 0);

  ProgramCopies sent(fakes.Send(), fakes.Tell());
  ASSERT_TRUE(sent.SendOnce().ok());
  sent.SendAgain();
  fakes.WaitTold(2);
  sent.Shutdown();
  EXPECT_EQ(fakes.sends, 2);
  EXPECT_EQ(sent.Known().program, "p2");
}

TEST(ProgramCopiesTest, NothingStartsOnceShutDown) {
  Fakes fakes;
  ProgramCopies copies(fakes.Send(), fakes.Tell());
  ASSERT_TRUE(copies.SendOnce().ok());
  copies.Shutdown();
  copies.Wanted();
  copies.SendAgain();
  copies.Shutdown();
  EXPECT_EQ(fakes.sends, 1);
  EXPECT_EQ(fakes.told.size(), 1u);
}

}  // namespace
}  // namespace shoal::internal
