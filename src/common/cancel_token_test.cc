#include "common/cancel_token.h"

#include "gtest/gtest.h"

namespace shoal {
namespace {

TEST(CancelTokenTest, TokensAreNeverZeroAndLeaveTheFlagBitsFree) {
  for (const char* id : {"", "a", "task-1", "task-2"}) {
    const int32_t token = CancelToken(id);
    EXPECT_GT(token, 0) << id;
    EXPECT_EQ(token & ~(CancelSignal::kRecursive - 1), 0) << id;
  }
  EXPECT_NE(CancelToken("task-1"), CancelToken("task-2"));
}

TEST(CancelTokenTest, ASignalCarriesTheTokenAndHowToCancel) {
  const int32_t token = CancelToken("task-1");
  for (bool recursive : {false, true}) {
    for (bool then_exit : {false, true}) {
      const int32_t value =
          CancelSignal{
              .token = token, .recursive = recursive, .then_exit = then_exit}
              .Encode();
      EXPECT_GT(value, 0);  // a valid sigqueue value either way
      const CancelSignal back = CancelSignal::Decode(value);
      EXPECT_EQ(back.token, token);
      EXPECT_EQ(back.recursive, recursive);
      EXPECT_EQ(back.then_exit, then_exit);
    }
  }
}

}  // namespace
}  // namespace shoal
