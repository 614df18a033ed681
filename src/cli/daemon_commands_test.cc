// The hidden `_head` and `_agent` commands and `shoal dev`: what they make
// of their flags, without serving anything.
#include "cli/daemon_commands.h"

#include <stdlib.h>

#include <map>
#include <string>

#include "agent/agent.h"
#include "cli/cli_fakes.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli::testing {
namespace {

using ::testing::HasSubstr;

class AgentOptionsTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    // An empty device tree: no accelerator of this host is detected.
    setenv("SHOAL_DEVICE_ROOT", dir_.c_str(), 1);
    setenv("SHOAL_TOKEN", "tok", 1);
  }
  void TearDown() override {
    unsetenv("SHOAL_DEVICE_ROOT");
    unsetenv("SHOAL_TOKEN");
    CliTest::TearDown();
  }
  agent_daemon::Flags Flags() {
    agent_daemon::Flags f;
    f.address = "10.0.0.1:6379";
    f.node_ip = "127.0.0.1";
    f.session_dir = dir_;
    return f;
  }
};

TEST_F(AgentOptionsTest, AdvertisesWhatTheFlagsSayOverWhatIsDetected) {
  agent_daemon::Flags f = Flags();
  f.advertised.num_cpus = 3;
  f.advertised.resources_json = "{\"accel_x\": 2}";
  f.advertised.labels_json = "{\"zone\": \"a\"}";
  f.head_node = true;
  f.node_id = "n7";
  f.head_timeout_s = 5;
  auto o = agent_daemon::BuildOptions(f);
  ASSERT_TRUE(o.ok()) << o.status();
  std::map<std::string, double> amounts = o->resources.ToDoubles();
  EXPECT_EQ(amounts["CPU"], 3);
  EXPECT_EQ(amounts["accel_x"], 2);
  EXPECT_EQ(o->labels.at("zone"), "a");
  EXPECT_EQ(o->token, "tok");
  EXPECT_EQ(o->node_id, "n7");
  EXPECT_TRUE(o->is_head_node);
  EXPECT_EQ(o->head_timeout_ms, 5000);
  EXPECT_EQ(o->head_address, "10.0.0.1:6379");
}

TEST_F(AgentOptionsTest, AHugeHeadTimeoutMeansNeverNotAnOverflow) {
  agent_daemon::Flags f = Flags();
  f.head_timeout_s = int64_t{1} << 62;
  auto o = agent_daemon::BuildOptions(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->head_timeout_ms, (int64_t{1} << 40) * 1000);
}

TEST_F(AgentOptionsTest, RefusesWhatTheNodeCannotAdvertise) {
  agent_daemon::Flags f = Flags();
  f.node_id = "../x";
  EXPECT_FALSE(agent_daemon::BuildOptions(f).ok());
  f = Flags();
  f.advertised.num_gpus = 0.5;
  auto half = agent_daemon::BuildOptions(f);
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(std::string(half.status().message()),
              HasSubstr("--num-gpus=0.5 is not a device count"));
}

TEST_F(AgentOptionsTest, TheHiddenCommandsNeedTheirSessionFolder) {
  Shoal shoal;
  EXPECT_EQ(shoal.Run({"_head"}).code, 2);
  EXPECT_EQ(shoal.Run({"_agent", "--address", "10.0.0.1:6379"}).code, 2);
}

TEST_F(AgentOptionsTest, FakeTpuMakesAHostAndPrintsItsVariables) {
  Shoal shoal;
  const std::string root = dir_ + "/tpu";
  Ran ran = shoal.Run({"dev", "fake-tpu", "--type", "v5p-16", "--worker", "1",
                       "--root", root, "--hostnames", "h0,h1"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("export SHOAL_DEVICE_ROOT=" + root + "\n"));
  EXPECT_THAT(ran.out, HasSubstr("export TPU_ACCELERATOR_TYPE=v5p-16\n"));
  EXPECT_THAT(ran.out, HasSubstr("export TPU_WORKER_ID=1\n"));
  EXPECT_THAT(ran.out, HasSubstr("export TPU_WORKER_HOSTNAMES=h0,h1\n"));
  EXPECT_THAT(ran.err, HasSubstr("Made a fake TPU host (v5p-16, worker 1)"));
  EXPECT_TRUE(std::filesystem::exists(root + "/dev"));

  Ran bad = shoal.Run({"dev", "fake-tpu", "--type", "v9z-8", "--root", root});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("shoal: "));

  // Whole slices of several types, an env file per host.
  Ran slices = shoal.Run(
      {"dev", "fake-tpu", "--slices", "v5p-16:2,v6e-8", "--root", root});
  ASSERT_EQ(slices.code, 0) << slices.err;
  EXPECT_EQ(slices.out, root + "/v5p-16-0-0.env\n" + root +
                            "/v5p-16-0-1.env\n" + root + "/v5p-16-1-0.env\n" +
                            root + "/v5p-16-1-1.env\n" + root +
                            "/v6e-8-0-0.env\n");
  EXPECT_THAT(slices.err, HasSubstr("Made slice v6e-8-0 (v6e-8, 1 host(s) of "
                                    "8 chips)"));
  auto env = ReadFile(root + "/v5p-16-1-1.env");
  ASSERT_TRUE(env.ok());
  EXPECT_THAT(*env, HasSubstr("export TPU_NAME=v5p-16-1\n"));
  EXPECT_THAT(*env, HasSubstr("export TPU_WORKER_ID=1\n"));
  EXPECT_THAT(*env, HasSubstr("export SHOAL_DEVICE_ROOT=" + root +
                              "/v5p-16-1/host1\n"));
  EXPECT_EQ(
      shoal.Run({"dev", "fake-tpu", "--slices", "v5p-16:x", "--root", root})
          .code,
      2);
  EXPECT_EQ(shoal.Run({"dev", "fake-tpu", "--root", root}).code, 2);
}

}  // namespace
}  // namespace shoal::cli::testing
