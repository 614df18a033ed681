#include "common/logging.h"

#include <stdlib.h>
#include <time.h>

#include <string>

#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

// Every field has a fixed width, so that lines sort and align: 68 ms is
// ".068", not ".68".
TEST(LoggingTest, TimestampsAreZeroPadded) {
  setenv("TZ", "UTC", 1);
  tzset();
  // 2026-03-04 05:06:07 UTC.
  constexpr time_t kWhen = 1772600767;
  struct Case {
    suseconds_t usec;
    std::string want;
  };
  const Case cases[] = {
      {68000, "0304 05:06:07.068"},  {7999, "0304 05:06:07.007"},
      {0, "0304 05:06:07.000"},      {999999, "0304 05:06:07.999"},
      {120000, "0304 05:06:07.120"},
  };
  for (const Case& c : cases) {
    timeval when{kWhen, c.usec};
    EXPECT_EQ(LogTimestamp(when), c.want) << c.usec;
  }
}

}  // namespace
}  // namespace shoal::internal
