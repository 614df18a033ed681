#include "common/environment.h"

#include <stdlib.h>

#include <optional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/environment_testing.h"
#include "gtest/gtest.h"

namespace shoal::env {
namespace {

std::optional<std::string> Maybe(const char* value) {
  if (value == nullptr) return std::nullopt;
  return value;
}

TEST(EnvironmentTest, EveryVariableIsDeclaredOnceAndDescribed) {
  std::set<std::string> names;
  for (const Variable& v : Table()) {
    SCOPED_TRACE(v.name);
    EXPECT_TRUE(names.insert(v.name).second) << "declared twice";
    EXPECT_EQ(&Describe(v.var), &v);
    EXPECT_STREQ(Name(v.var), v.name);
    std::string doc = v.doc;
    EXPECT_GT(doc.size(), 10u);
    EXPECT_TRUE(absl::EndsWith(doc, ".")) << doc;
    // Ours are SHOAL_*; every variable with that prefix is ours to set or
    // to read, never another tool's.
    EXPECT_EQ(absl::StartsWith(v.name, "SHOAL_"), v.set_by != Setter::kOther);
    if (v.type == Type::kInteger && *v.default_value != '\0') {
      int64_t parsed = 0;
      EXPECT_TRUE(absl::SimpleAtoi(v.default_value, &parsed));
      EXPECT_GE(parsed, v.minimum);
    }
    if (v.type == Type::kFlag) {
      EXPECT_TRUE(std::string(v.default_value) == "0" ||
                  std::string(v.default_value) == "1");
    }
  }
  EXPECT_GT(names.size(), 60u);
}

TEST(EnvironmentTest, UnsetAndEmptyMeanTheDefault) {
  {
    ScopedEnv unset("SHOAL_TEMP_DIR", std::nullopt);
    EXPECT_EQ(Find(Var::kTempDir), std::nullopt);
    EXPECT_EQ(Get(Var::kTempDir), "/tmp/shoal");
  }
  {
    ScopedEnv empty("SHOAL_TEMP_DIR", "");
    EXPECT_EQ(Find(Var::kTempDir), std::nullopt);
    EXPECT_EQ(Get(Var::kTempDir), "/tmp/shoal");
  }
  ScopedEnv set("SHOAL_TEMP_DIR", "/scratch/me");
  EXPECT_EQ(Find(Var::kTempDir), "/scratch/me");
  EXPECT_EQ(Get(Var::kTempDir), "/scratch/me");
}

TEST(EnvironmentTest, IntegersBelowTheirMinimumOrNotNumbersTakeTheDefault) {
  struct Case {
    const char* value;
    std::optional<int64_t> found;
    int64_t got;
  };
  const Case cases[] = {
      {nullptr, std::nullopt, 128},
      {"", std::nullopt, 128},
      {"7", 7, 7},
      {"0", std::nullopt, 128},  // minimum 1
      {"-3", std::nullopt, 128},
      {"12x", std::nullopt, 128},
      {"lots", std::nullopt, 128},
      {" 9", 9, 9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value == nullptr ? "(unset)" : c.value);
    ScopedEnv spins("SHOAL_SHM_SPINS", Maybe(c.value));
    EXPECT_EQ(FindInt(Var::kShmSpins), c.found);
    EXPECT_EQ(GetInt(Var::kShmSpins), c.got);
  }
  // 0 is a value where the minimum allows it: no bound on pending tasks.
  ScopedEnv unbounded("SHOAL_MAX_PENDING_TASKS", "0");
  EXPECT_EQ(GetInt(Var::kMaxPendingTasks), 0);
}

TEST(EnvironmentTest, FlagsAreOnForOneTrueOrYes) {
  struct Case {
    const char* value;
    bool on;
  };
  const Case cases[] = {{nullptr, false}, {"1", true},    {"true", true},
                        {"YES", true},    {"True", true}, {"0", false},
                        {"no", false},    {"", false},    {"2", false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value == nullptr ? "(unset)" : c.value);
    ScopedEnv mutual("SHOAL_TLS_MUTUAL", Maybe(c.value));
    EXPECT_EQ(IsOn(Var::kTlsMutual), c.on);
  }
}

}  // namespace
}  // namespace shoal::env
