#include "cli/flag_checks.h"

#include <CLI/CLI.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli {
namespace {

using ::testing::HasSubstr;

// What a CLI11 validator says of `value` ("" for a good one).
std::string Says(CLI::Validator v, std::string value) { return v(value); }

TEST(FlagChecksTest, HostPort) {
  EXPECT_EQ(Says(HostPort(), "10.0.0.1:6379"), "");
  EXPECT_EQ(Says(HostPort(), "10.0.0.1"),
            "must be HOST:PORT with a port from 1 to 65535, e.g. "
            "10.0.0.1:6379 (got \"10.0.0.1\")");
  EXPECT_NE(Says(HostPort(), "h:0"), "");
}

TEST(FlagChecksTest, Numbers) {
  for (const char* good : {"0", "1.5", ".5", "2e3"}) {
    EXPECT_EQ(CheckNumber(good), "") << good;
  }
  for (const char* bad : {"-1", "0x10", "inf", "nan", "", "1,5"}) {
    EXPECT_EQ(CheckNumber(bad),
              absl::StrCat("must be a number of 0 or more (got \"", bad, "\")"))
        << bad;
  }
  EXPECT_EQ(Says(AtLeast(1), "1"), "");
  EXPECT_EQ(Says(AtLeast(1), "0"),
            "must be a whole number of 1 or more (got \"0\")");
  EXPECT_EQ(Says(ListenPort(), "0"), "");
  EXPECT_THAT(Says(ListenPort(), "65536"), HasSubstr("or 0 for any free port"));
  EXPECT_EQ(Says(StoreBytes(), "0"), "");
  EXPECT_EQ(Says(StoreBytes(), "1048576"), "");
  EXPECT_EQ(Says(StoreBytes(), "1000"),
            "must be a byte count of at least 1048576 (1 MiB), or 0 for no "
            "object store (got \"1000\")");
}

TEST(FlagChecksTest, OneOfNamesTheNearest) {
  EXPECT_EQ(Says(OneOf({"text", "json"}), "json"), "");
  EXPECT_EQ(Says(OneOf({"text", "json"}), "jsno"),
            "must be text or json (got \"jsno\"); did you mean json?");
  EXPECT_EQ(Says(OneOf({"text", "json"}), "yaml"),
            "must be text or json (got \"yaml\")");
}

TEST(FlagChecksTest, AdvertisedAmountsTheNodeWouldRefuse) {
  AdvertisedFlags f;
  EXPECT_TRUE(CheckAdvertised(f).ok());
  f.num_gpus = 2.5;
  EXPECT_THAT(std::string(CheckAdvertised(f).message()),
              HasSubstr("--num-gpus: "));
  f.num_gpus = 2;
  f.labels_json = "[]";
  EXPECT_THAT(std::string(CheckAdvertised(f).message()),
              HasSubstr("--labels: "));
  f.labels_json = "{\"zone\": \"a\"}";
  f.resources_json = "{\"x\": -1}";
  EXPECT_THAT(std::string(CheckAdvertised(f).message()),
              HasSubstr("--resources: "));
}

TEST(FlagChecksTest, ShoalAddressMustBeHostPortUnlessAnAddressIsGiven) {
  setenv("SHOAL_ADDRESS", "nohost", 1);
  EXPECT_THAT(std::string(CheckAddressEnvironment("").message()),
              HasSubstr("SHOAL_ADDRESS must be HOST:PORT"));
  EXPECT_TRUE(CheckAddressEnvironment("10.0.0.1:1").ok());
  setenv("SHOAL_ADDRESS", "10.0.0.1:1", 1);
  EXPECT_TRUE(CheckAddressEnvironment("").ok());
  unsetenv("SHOAL_ADDRESS");
  EXPECT_TRUE(CheckAddressEnvironment("").ok());
}

}  // namespace
}  // namespace shoal::cli
