#include "cli/symmetric_run_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli::symmetric_run {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// What srun -N3 -c2 --mem=1000 --gres=gpu:1 gives node `index`.
launch::SlurmAllocation Step(int index) {
  launch::SlurmAllocation a;
  a.job_id = "12";
  a.step_id = "0";
  a.hosts = {"n1", "n2", "n3"};
  a.node_index = index;
  a.cpus = 2;
  a.memory_bytes = int64_t{1000} << 20;
  a.gpus = {"3"};
  a.submit_dir = "/home/u/run";
  return a;
}

Flags Program(std::vector<std::string> argv) {
  Flags f;
  f.argv = std::move(argv);
  return f;
}

TEST(PlanNodeTest, NodeZeroRunsTheHeadWithWhatSlurmGaveIt) {
  auto p = PlanNode(Program({"python3", "train.py"}), Step(0), "/bin/shoal");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->head);
  EXPECT_EQ(p->head_host, "n1");
  EXPECT_EQ(p->min_nodes, 3);
  EXPECT_EQ(p->job_dir, "/home/u/run/.shoal/12.0");
  EXPECT_EQ(p->temp_dir, "/tmp/shoal/slurm-12.0-0");
  EXPECT_THAT(
      p->start_args,
      ElementsAre("/bin/shoal", "start", "--head", "--port", "6379", "--block",
                  "--temp-dir", "/tmp/shoal/slurm-12.0-0", "--num-cpus", "2",
                  "--num-gpus", "1", "--object-store-memory", "314572800",
                  "--memory", "734003200"));
  EXPECT_THAT(p->program, ElementsAre("python3", "train.py"));
  // The token is never on a command line.
  for (const std::string& arg : p->start_args) {
    EXPECT_THAT(arg, ::testing::Not(HasSubstr("token")));
  }
}

TEST(PlanNodeTest, OtherNodesJoinAndRunNothingThemselves) {
  auto p = PlanNode(Program({"true"}), Step(2), "/bin/shoal");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->head);
  EXPECT_EQ(p->temp_dir, "/tmp/shoal/slurm-12.0-2");
  EXPECT_THAT(p->start_args, ::testing::Not(::testing::Contains("--head")));
}

TEST(PlanNodeTest, NoGresMeansNoGpus) {
  launch::SlurmAllocation a = Step(1);
  a.gpus.clear();
  auto p = PlanNode(Program({"true"}), a, "/bin/shoal");
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->start_args, IsSupersetOf({"--num-gpus", "0"}));
}

TEST(PlanNodeTest, PerHostRunsTheProgramAsALaunchGang) {
  Flags f = Program({"python3", "jax_train.py"});
  f.per_host = true;
  auto p = PlanNode(f, Step(0), "/bin/shoal");
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->program, ElementsAre("/bin/shoal", "launch", "--per-host",
                                      "--", "python3", "jax_train.py"));
  f.per_host = false;
  f.per_device = true;
  f.nproc_per_node = 2;
  p = PlanNode(f, Step(0), "/bin/shoal");
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->program, ElementsAre("/bin/shoal", "launch", "--per-device",
                                      "--nproc-per-node", "2", "--", "python3",
                                      "jax_train.py"));
}

TEST(PlanNodeTest, AddressPicksTheHeadAmongTheStepsHosts) {
  Flags f = Program({"true"});
  f.address = "n2:7000";
  auto p = PlanNode(f, Step(1), "/bin/shoal");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->head);
  EXPECT_EQ(p->port, 7000);
  EXPECT_EQ(p->head_host, "n2");
  p = PlanNode(f, Step(0), "/bin/shoal");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->head);
  f.address = "elsewhere:6379";
  EXPECT_THAT(PlanNode(f, Step(0), "/bin/shoal").status().message(),
              HasSubstr("the step's hosts are n1, n2, n3; name one of them"));
}

TEST(PlanNodeTest, WrongUseIsRefusedSayingHowToRunIt) {
  EXPECT_THAT(PlanNode(Flags{}, Step(0), "/bin/shoal").status().message(),
              HasSubstr("give the program to run after --"));
  launch::SlurmAllocation batch = Step(0);
  batch.node_index = -1;
  EXPECT_THAT(
      PlanNode(Program({"true"}), batch, "/bin/shoal").status().message(),
      HasSubstr("srun --nodes=N --ntasks-per-node=1"));
  Flags f = Program({"true"});
  f.min_nodes = 4;
  EXPECT_THAT(PlanNode(f, Step(0), "/bin/shoal").status().message(),
              HasSubstr("--min-nodes 4: the step has 3 nodes"));
  f.min_nodes = 0;
  f.per_host = f.per_device = true;
  EXPECT_THAT(PlanNode(f, Step(0), "/bin/shoal").status().message(),
              HasSubstr("not both"));
}

}  // namespace
}  // namespace shoal::cli::symmetric_run
