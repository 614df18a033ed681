// Data-parallel training (examples/train_data_parallel.cc) on a simulated TPU
// v5p-16 slice: one replica alone on the whole batch, then 1, 4 and 8 devices
// (per device) and 8 devices as 2 hosts x 4 threads (per host) with the same
// global batch and seed. Every run must end with the same weights as the
// single process, within float tolerance, and must have learned the task.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

constexpr char kTrainer[] = SHOAL_TRAINER_BINARY;
constexpr int kSteps = 300;

// Runs argv with extra environment; returns the exit code, output in *out.
int RunProgram(const std::vector<std::string>& argv,
               const std::vector<std::string>& env, std::string* out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  out->clear();
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out->append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<float> ReadWeights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

// The fields of the RESULT line a run prints.
std::map<std::string, std::string> Result(const std::string& out) {
  std::map<std::string, std::string> fields;
  size_t at = out.find("RESULT ");
  if (at == std::string::npos) return fields;
  std::string line = out.substr(at + 7, out.find('\n', at) - at - 7);
  size_t pos = 0;
  while (pos < line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string::npos) end = line.size();
    std::string kv = line.substr(pos, end - pos);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    pos = end + 1;
  }
  return fields;
}

double Field(const std::map<std::string, std::string>& r, const char* key) {
  double v = NAN;
  auto it = r.find(key);
  if (it != r.end() && !absl::SimpleAtod(it->second, &v)) v = NAN;
  return v;
}

class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/shoal-training-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = new std::string(tmpl);
    auto cluster = TestCluster::StartFakeTpuSlice(*root_, "v5p-16", 2, 4);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    // The reference: one process on the whole batch.
    std::string out;
    ASSERT_EQ(RunProgram({kTrainer, "--steps", std::to_string(kSteps), "--save",
                          *root_ + "/alone.bin"},
                         {}, &out),
              0)
        << out;
    reference_ = new std::vector<float>(ReadWeights(*root_ + "/alone.bin"));
    reference_result_ = new std::map<std::string, std::string>(Result(out));
  }
  static void TearDownTestSuite() {
    if (cluster_) {
      cluster_->Stop();
      EXPECT_EQ(cluster_->sanitizer_reports(), "");
      delete cluster_;
    }
    std::error_code ec;
    if (root_) std::filesystem::remove_all(*root_, ec);
  }

  std::vector<std::string> TrainerArgs(const std::string& save) {
    return {kTrainer, "--steps", std::to_string(kSteps), "--save",
            *root_ + "/" + save};
  }

  int Launch(std::vector<std::string> args, const std::string& save,
             std::string* out, TestCluster* cluster = nullptr) {
    if (cluster == nullptr) cluster = cluster_;
    std::vector<std::string> argv = {"launch", "--address", cluster->address(),
                                     "--token", cluster->token()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--");
    for (const auto& a : TrainerArgs(save)) argv.push_back(a);
    return RunCli(argv, out);
  }

  // Same weights as the single process, and a model that learned.
  void ExpectSameModelAsAlone(const std::string& save, const std::string& out,
                              int replicas) {
    std::vector<float> w = ReadWeights(*root_ + "/" + save);
    ASSERT_EQ(w.size(), reference_->size()) << out;
    ASSERT_FALSE(w.empty());
    double max_diff = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      max_diff = std::max<double>(max_diff, std::fabs(w[i] - (*reference_)[i]));
    }
    EXPECT_LT(max_diff, 2e-4) << "replicas=" << replicas << "\n" << out;
    auto r = Result(out);
    EXPECT_EQ(Field(r, "replicas"), replicas) << out;
    EXPECT_LT(Field(r, "final_loss"), 0.4) << out;
    EXPECT_GT(Field(r, "test_accuracy"), 0.85) << out;
  }

  static std::string* root_;
  static TestCluster* cluster_;
  static std::vector<float>* reference_;
  static std::map<std::string, std::string>* reference_result_;
};

std::string* TrainingTest::root_ = nullptr;
TestCluster* TrainingTest::cluster_ = nullptr;
std::vector<float>* TrainingTest::reference_ = nullptr;
std::map<std::string, std::string>* TrainingTest::reference_result_ = nullptr;

TEST_F(TrainingTest, AloneLearnsTheTask) {
  // An untrained model is at chance: loss ~ln(8) = 2.08, accuracy ~1/8.
  EXPECT_LT(Field(*reference_result_, "final_loss"), 0.4);
  EXPECT_GT(Field(*reference_result_, "test_accuracy"), 0.85);
}

TEST_F(TrainingTest, OneDeviceGroupMatchesAlone) {
  std::string out;
  ASSERT_EQ(
      RunProgram(TrainerArgs("one.bin"),
                 {"SHOAL_LAUNCH_MODE=per-device", "SHOAL_RANK=0",
                  "SHOAL_WORLD_SIZE=1", "SHOAL_ADDRESS=" + cluster_->address(),
                  "SHOAL_TOKEN=" + cluster_->token()},
                 &out),
      0)
      << out;
  ExpectSameModelAsAlone("one.bin", out, 1);
}

TEST_F(TrainingTest, FourDevicesOfOneHostMatchAlone) {
  // A TPU slice runs whole: four chips of one host are a v5p-8.
  auto host = TestCluster::StartFakeTpuSlice(*root_ + "/v5p-8", "v5p-8", 1, 4);
  ASSERT_TRUE(host.ok()) << host.status();
  std::string out;
  int code = Launch({"--per-device"}, "four.bin", &out, host->get());
  (*host)->Stop();
  EXPECT_EQ((*host)->sanitizer_reports(), "");
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("all 4 processes exited 0"));
  ExpectSameModelAsAlone("four.bin", out, 4);
}

TEST_F(TrainingTest, EightDevicesOfTwoHostsPerDeviceMatchAlone) {
  std::string out;
  ASSERT_EQ(Launch({"--per-device"}, "eight.bin", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("all 8 processes exited 0"));
  ExpectSameModelAsAlone("eight.bin", out, 8);
}

TEST_F(TrainingTest, EightDevicesOfTwoHostsPerHostMatchAlone) {
  std::string out;
  ASSERT_EQ(Launch({"--per-host"}, "hosts.bin", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("all 2 processes exited 0"));
  ExpectSameModelAsAlone("hosts.bin", out, 8);
}

}  // namespace
