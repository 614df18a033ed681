#include "cli/status_command.h"

#include <string>

#include "cli/cli_fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace shoal::cli::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

proto::ClusterStatus TwoNodes() {
  proto::ClusterStatus status;
  status.set_head_address("10.0.0.1:6379");
  for (const char* id : {"n1", "n2"}) {
    proto::NodeInfo* n = status.add_nodes();
    n->set_node_id(id);
    n->set_address(std::string(id) + ":1");
    n->set_alive(std::string(id) == "n1");
    n->set_is_head_node(std::string(id) == "n1");
  }
  return status;
}

class StatusTest : public CliTest {
 protected:
  Shoal shoal_;
};

TEST_F(StatusTest, PrintsTheHeadsStatusAsText) {
  shoal_.cluster.status = TwoNodes();
  Ran ran =
      shoal_.Run({"status", "--address", "10.0.0.1:6379", "--token", "tok"});
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.connections, ElementsAre(Pair("10.0.0.1:6379", "tok")));
  EXPECT_THAT(ran.out, HasSubstr("Head: 10.0.0.1:6379\n"));
  EXPECT_THAT(ran.out, HasSubstr("Active:\n n1  n1:1  ALIVE  (head)\n"));
  EXPECT_THAT(ran.out, HasSubstr("Dead:\n n2  n2:1  DEAD\n"));
}

TEST_F(StatusTest, PrintsJson) {
  shoal_.cluster.status = TwoNodes();
  Ran ran = shoal_.Run({"status", "--address", "10.0.0.1:6379", "--token",
                        "tok", "--format", "json"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  nlohmann::json j = nlohmann::json::parse(ran.out);
  EXPECT_EQ(j["nodes"].size(), 2u);
}

TEST_F(StatusTest, SaysWhichClusterDidNotAnswer) {
  shoal_.cluster.status = absl::UnavailableError("connection refused");
  Ran ran =
      shoal_.Run({"status", "--address", "10.0.0.1:6379", "--token", "tok"});
  EXPECT_EQ(ran.code, 1);
  EXPECT_EQ(ran.err,
            "shoal: cannot get the status of the cluster at 10.0.0.1:6379: "
            "connection refused\n");
  EXPECT_EQ(ran.out, "");
}

TEST_F(StatusTest, ABadShoalAddressIsAUsageError) {
  setenv("SHOAL_ADDRESS", "nohost", 1);
  Ran ran = shoal_.Run({"status"});
  unsetenv("SHOAL_ADDRESS");
  EXPECT_EQ(ran.code, 2);
  EXPECT_THAT(ran.err, HasSubstr("shoal: SHOAL_ADDRESS must be HOST:PORT"));
  EXPECT_TRUE(ran.connections.empty());
}

TEST_F(StatusTest, WithoutAClusterSaysHowToNameOne) {
  Ran ran = shoal_.Run({"status", "--temp-dir", dir_ + "/none"});
  EXPECT_EQ(ran.code, 1);
  EXPECT_THAT(ran.err, HasSubstr("shoal: "));
  EXPECT_TRUE(ran.connections.empty());
}

TEST_F(StatusTest, TakesTheAddressFromTheEnvironment) {
  setenv("SHOAL_ADDRESS", "10.0.0.9:7000", 1);
  Ran ran = shoal_.Run({"status", "--token", "tok"});
  unsetenv("SHOAL_ADDRESS");
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.connections, ElementsAre(Pair("10.0.0.9:7000", "tok")));
}

}  // namespace
}  // namespace shoal::cli::testing
