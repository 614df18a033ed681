#include "cli/config_command.h"

#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "common/environment.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace shoal::cli::config {
namespace {

// A lookup over a fixed environment, not the test process's.
Lookup From(std::map<std::string, std::string> vars) {
  return [vars](env::Var var) -> std::optional<std::string> {
    auto it = vars.find(env::Name(var));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigCommandTest, ListsEveryVariableWithItsDefaultAndValue) {
  std::ostringstream out;
  ASSERT_EQ(*PrintTable({}, From({{"SHOAL_ADDRESS", "10.0.0.2:6379"}}), out),
            0);
  std::string text = out.str();
  for (const env::Variable& v : env::Table()) {
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("  ", v.name, " (")))
        << v.name;
  }
  EXPECT_TRUE(absl::StrContains(
      text, "SHOAL_ADDRESS (HOST:PORT) = 10.0.0.2:6379\n      The head"));
  EXPECT_TRUE(
      absl::StrContains(text, "SHOAL_TEMP_DIR (path, default /tmp/shoal)\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "SHOAL_SHM_SPINS (integer, default 128, at least 1)\n"));
  // The sections in order: the user's, Shoal's, others'.
  size_t yours = text.find("Set by you:");
  size_t ours = text.find("Set by Shoal for");
  size_t others = text.find("Set by other tools");
  EXPECT_LT(yours, ours);
  EXPECT_LT(ours, others);
  EXPECT_NE(others, std::string::npos);
}

TEST(ConfigCommandTest, TheTokenIsNeverPrinted) {
  for (bool json : {false, true}) {
    std::ostringstream out;
    Flags flags;
    flags.json = json;
    ASSERT_TRUE(
        PrintTable(flags, From({{"SHOAL_TOKEN", "s3cr3t-t0ken"}}), out).ok());
    EXPECT_FALSE(absl::StrContains(out.str(), "s3cr3t")) << out.str();
    EXPECT_TRUE(absl::StrContains(out.str(), "(set, not shown)"));
  }
}

TEST(ConfigCommandTest, JsonIsValidForAnyBytes) {
  std::ostringstream out;
  Flags flags;
  flags.json = true;
  flags.names = {"SHOAL_TEMP_DIR", "SHOAL_LOG_LEVEL"};
  ASSERT_TRUE(
      PrintTable(flags, From({{"SHOAL_TEMP_DIR", "/tmp/caf\xe9\xff"}}), out)
          .ok());
  nlohmann::json list = nlohmann::json::parse(out.str());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["name"], "SHOAL_TEMP_DIR");
  EXPECT_EQ(list[0]["default"], "/tmp/shoal");
  EXPECT_EQ(list[0]["set_by"], "user");
  EXPECT_EQ(list[0]["value"], "/tmp/caf\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(list[1]["name"], "SHOAL_LOG_LEVEL");
  EXPECT_TRUE(list[1]["value"].is_null());
}

TEST(ConfigCommandTest, AnUnknownNameIsAnErrorThatSaysWhatToDo) {
  std::ostringstream out;
  Flags flags;
  flags.names = {"SHOAL_ADRESS"};
  absl::StatusOr<int> status = PrintTable(flags, From({}), out);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.status().message(),
                                "Shoal neither reads nor sets SHOAL_ADRESS"));
  EXPECT_TRUE(absl::StrContains(status.status().message(), "shoal config"));
}

}  // namespace
}  // namespace shoal::cli::config
