#include "launch/slurm_allocation.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct HostlistCase {
  const char* text;
  std::vector<std::string> hosts;
};

class HostlistTest : public ::testing::TestWithParam<HostlistCase> {};

// What `scontrol show hostnames` prints for the same lists.
TEST_P(HostlistTest, ExpandsAsScontrolDoes) {
  auto hosts = ExpandHostlist(GetParam().text);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, GetParam().hosts);
}

INSTANTIATE_TEST_SUITE_P(
    Lists, HostlistTest,
    ::testing::Values(
        HostlistCase{"node1", {"node1"}},
        HostlistCase{"node[1-3]", {"node1", "node2", "node3"}},
        HostlistCase{"node[1-2,7],gpu-a", {"node1", "node2", "node7", "gpu-a"}},
        HostlistCase{"tpu[08-11]", {"tpu08", "tpu09", "tpu10", "tpu11"}},
        HostlistCase{"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},
        HostlistCase{"a[3]-ib,b", {"a3-ib", "b"}},
        HostlistCase{"x[001-002],y[9-10]", {"x001", "x002", "y9", "y10"}},
        HostlistCase{" a , b ", {"a", "b"}}, HostlistCase{"", {}}));

TEST(HostlistTest, BadListsSayWhatIsWrong) {
  EXPECT_THAT(ExpandHostlist("node[1-3").status().message(),
              HasSubstr("unbalanced or nested brackets"));
  EXPECT_THAT(ExpandHostlist("node[[1]]").status().message(),
              HasSubstr("unbalanced or nested brackets"));
  EXPECT_THAT(ExpandHostlist("node[3-1]").status().message(),
              HasSubstr("\"3-1\" is not a number or a range"));
  EXPECT_THAT(ExpandHostlist("node[a-b]").status().message(),
              HasSubstr("is not a number or a range"));
  EXPECT_THAT(ExpandHostlist("node[0-99999999999]").status().message(),
              HasSubstr("names too many hosts"));
  EXPECT_THAT(ExpandHostlist("a[0-999]b[0-999]c[0-999]").status().message(),
              HasSubstr("names too many hosts"));
}

class ReadAllocationTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::optional<SlurmAllocation>> Read() {
    return ReadSlurmAllocation([this](const char* name) -> std::string {
      auto it = env_.find(name);
      return it == env_.end() ? "" : it->second;
    });
  }
  std::map<std::string, std::string> env_;
};

TEST_F(ReadAllocationTest, OutsideSlurmThereIsNone) {
  auto a = Read();
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
}

// What srun sets for `srun -N3 -c2 --mem=3G --gres=gpu:2` on the second
// node.
TEST_F(ReadAllocationTest, ReadsWhatSrunSets) {
  env_ = {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NODELIST", "node[1-4]"},
          {"SLURM_STEP_NODELIST", "node[2-4]"},
          {"SLURM_NODEID", "1"},
          {"SLURM_CPUS_ON_NODE", "2"},
          {"SLURM_MEM_PER_NODE", "3072"},
          {"SLURM_GPUS_ON_NODE", "2"},
          {"CUDA_VISIBLE_DEVICES", "0,1"},
          {"SLURM_SUBMIT_DIR", "/home/a/run"}};
  auto a = Read();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  const SlurmAllocation& s = **a;
  EXPECT_EQ(s.job_id, "42");
  EXPECT_EQ(s.step_id, "0");
  EXPECT_THAT(s.hosts, ElementsAre("node2", "node3", "node4"));
  EXPECT_EQ(s.node_index, 1);
  EXPECT_EQ(s.cpus, 2);
  EXPECT_EQ(s.memory_bytes, int64_t{3072} << 20);
  EXPECT_THAT(s.gpus, ElementsAre("0", "1"));
  EXPECT_EQ(s.submit_dir, "/home/a/run");
}

TEST_F(ReadAllocationTest, TheBatchScriptSeesTheJobsHostsAndNoGpus) {
  env_ = {{"SLURM_JOB_ID", "7"},
          {"SLURM_JOB_NODELIST", "n[1-2]"},
          {"SLURM_CPUS_ON_NODE", "4"},
          {"SLURM_MEM_PER_CPU", "100"}};
  auto a = Read();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT((*a)->hosts, ElementsAre("n1", "n2"));
  EXPECT_EQ((*a)->node_index, -1);
  EXPECT_EQ((*a)->memory_bytes, int64_t{400} << 20);
  EXPECT_TRUE((*a)->gpus.empty());  // no --gres: none of the host's
}

TEST_F(ReadAllocationTest, BadVariablesAreNamed) {
  env_ = {{"SLURM_JOB_ID", "7"}};
  EXPECT_THAT(Read().status().message(), HasSubstr("names no host"));
  env_["SLURM_JOB_NODELIST"] = "n[1-";
  EXPECT_THAT(Read().status().message(), HasSubstr("SLURM_JOB_NODELIST: "));
  env_["SLURM_JOB_NODELIST"] = "n[1-2]";
  env_["SLURM_NODEID"] = "2";
  EXPECT_THAT(Read().status().message(),
              HasSubstr("SLURM_NODEID=2 but SLURM_JOB_NODELIST names 2"));
  env_["SLURM_NODEID"] = "x";
  EXPECT_THAT(Read().status().message(), HasSubstr("SLURM_NODEID=x"));
}

}  // namespace
}  // namespace shoal::launch
