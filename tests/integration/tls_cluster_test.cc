// A two-node cluster with mutual TLS on every connection, started with the
// `--tls-*` flags of `shoal start`: tasks on both nodes, an object made on
// one node and read on the other (object transfer between the agents), a
// `shoal launch` gang over both hosts, and `shoal status` with the right,
// missing and wrong TLS flags.
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/net.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/tls.h"
#include "rpc/tls_testing.h"
#include "shoal/api.h"
#include "tests/testing/agent_info.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::rpc::TestCertificates;
using ::shoal::testing::ClusterSpec;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kBig = 4 << 20;  // through the object stores

std::string WhereAmI() { return shoal::CurrentNodeId(); }
// A large object made where it runs, its first bytes naming the node.
shoal::Buffer MakeOnNode(int64_t size) {
  std::vector<uint8_t> bytes(size);
  for (int64_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  std::string node = shoal::CurrentNodeId();
  memcpy(bytes.data(), node.c_str(), node.size() + 1);
  return shoal::Buffer::Copy(bytes.data(), bytes.size());
}
// Where it ran, and what the argument's bytes after the name add up to.
std::string SumHere(shoal::Buffer in) {
  int64_t sum =
      std::accumulate(in.data() + 64, in.data() + in.size(), int64_t{0});
  return shoal::CurrentNodeId() + ":" + std::to_string(sum);
}
SHOAL_REMOTE(WhereAmI, MakeOnNode, SumHere);

// Unsets this process's SHOAL_TLS_* for one CLI run (empty is unset).
const std::vector<std::string> kNoTlsEnv = {
    "SHOAL_TLS_CERT=", "SHOAL_TLS_KEY=", "SHOAL_TLS_CA=", "SHOAL_TLS_MUTUAL="};

class TlsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = &shoal::rpc::SharedTestCertificates();
    ClusterSpec spec;
    spec.nodes = {{"tls-0", 2, R"({"on_0": 10})"},
                  {"tls-1", 2, R"({"on_1": 10})"}};
    for (auto& node : spec.nodes) node.extra_args = TlsFlags(*certs_);
    shoal::testing::StartSuiteCluster(spec, &cluster_);
    // This process is a driver: the same TLS, from the environment (read
    // at its first connection).
    certs_->Config(/*mutual=*/true).ExportToEnvironment();
    cluster_->Connect();
  }
  static void TearDownTestSuite() {
    shoal::Shutdown();
    shoal::testing::StopSuiteCluster(&cluster_);
  }

  static std::vector<std::string> TlsFlags(const TestCertificates& c) {
    return {"--tls-cert", c.cert, "--tls-key",   c.key,
            "--tls-ca",   c.ca,   "--tls-mutual"};
  }

  // `shoal status` against the cluster with `flags` and no SHOAL_TLS_*.
  int Status(const std::vector<std::string>& flags, std::string* out) {
    std::vector<std::string> args = {"status", "--address", cluster_->address(),
                                     "--token", cluster_->token()};
    args.insert(args.end(), flags.begin(), flags.end());
    return RunCli(args, out, kNoTlsEnv);
  }

  static const TestCertificates* certs_;
  static std::unique_ptr<TestCluster> cluster_;
};

const TestCertificates* TlsClusterTest::certs_ = nullptr;
std::unique_ptr<TestCluster> TlsClusterTest::cluster_;

TEST_F(TlsClusterTest, TasksRunOnBothNodes) {
  std::vector<shoal::ObjectRef<std::string>> refs;
  for (int i = 0; i < 20; ++i) {
    refs.push_back(
        shoal::Task(WhereAmI).SetResource(i % 2 ? "on_1" : "on_0", 1).Remote());
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(shoal::Get(refs[i]), i % 2 ? "tls-1" : "tls-0");
  }
}

TEST_F(TlsClusterTest, AnObjectMadeOnOneNodeIsPulledToTheOther) {
  auto made =
      shoal::Task(MakeOnNode).SetResource("on_1", 1).Remote(int64_t{kBig});
  int64_t want = 0;
  for (size_t i = 64; i < kBig; ++i) want += static_cast<uint8_t>(i * 7);
  // The task on tls-0 gets the object from tls-1's transfer port.
  EXPECT_EQ(
      shoal::Get(shoal::Task(SumHere).SetResource("on_0", 1).Remote(made)),
      "tls-0:" + std::to_string(want));
  shoal::Buffer got = shoal::Get(made);
  ASSERT_EQ(got.size(), kBig);
  EXPECT_STREQ(reinterpret_cast<const char*>(got.data()), "tls-1");
}

TEST_F(TlsClusterTest, LaunchRunsAGangOverBothHosts) {
  std::vector<std::string> args = {
      "launch",          "--address",  cluster_->address(), "--token",
      cluster_->token(), "--per-host", "--nodes",           "2"};
  std::vector<std::string> tls = TlsFlags(*certs_);
  args.insert(args.end(), tls.begin(), tls.end());
  args.insert(args.end(),
              {"--", "/bin/sh", "-c",
               "echo rank=$SHOAL_PROCESS_ID tls=$SHOAL_TLS_MUTUAL"});
  std::string out;
  ASSERT_EQ(RunCli(args, &out, kNoTlsEnv), 0) << out;
  EXPECT_THAT(out, AllOf(HasSubstr("rank=0 tls=1"), HasSubstr("rank=1 tls=1"),
                         HasSubstr("all 2 processes exited 0")));
}

TEST_F(TlsClusterTest, StatusNeedsTheTlsFlagsAndSaysWhichOnes) {
  std::string out;
  EXPECT_EQ(Status(TlsFlags(*certs_), &out), 0) << out;
  EXPECT_THAT(out, AllOf(HasSubstr("tls-0"), HasSubstr("tls-1")));

  out.clear();
  EXPECT_NE(Status({}, &out), 0);
  EXPECT_THAT(out, AllOf(HasSubstr("uses TLS"), HasSubstr("--tls-ca")));

  out.clear();
  EXPECT_NE(Status({"--tls-ca", certs_->ca}, &out), 0);
  EXPECT_THAT(out, AllOf(HasSubstr("requires a client certificate"),
                         HasSubstr("--tls-cert")));

  out.clear();
  EXPECT_NE(Status({"--tls-ca", certs_->other_ca}, &out), 0);
  EXPECT_THAT(out, HasSubstr("is not trusted"));

  out.clear();
  EXPECT_NE(Status({"--tls-ca", "/nonexistent/ca.pem"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("cannot read --tls-ca /nonexistent/ca.pem"));
}

// What a puller without TLS hears from a node's transfer port: the status
// of the reply to its hello, and the message after it.
std::pair<uint32_t, std::string> PlainTransferHello(const std::string& address,
                                                    const std::string& token) {
  sockaddr_in addr;
  if (!shoal::ResolveAddress(address, &addr).ok()) return {0, "bad address"};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return {0, "cannot connect"};
  }
  std::string hello = "SHXF";
  uint32_t size = static_cast<uint32_t>(token.size());
  hello.append(reinterpret_cast<const char*>(&size), 4).append(token);
  std::string reply;
  char buf[4096];
  if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(hello.size())) {
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, n);
  }
  close(fd);
  if (reply.size() < 20) return {0, "short reply: " + reply};
  uint32_t status;
  memcpy(&status, reply.data(), 4);
  return {status, reply.substr(20)};
}

TEST_F(TlsClusterTest, TransferPortsUseTlsAndTellPlainPullersSo) {
  auto agent = shoal::ReadFile(cluster_->session_dir(1) + "/agent_address");
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto info = shoal::testing::FetchAgentInfo(*agent, cluster_->token());
  ASSERT_TRUE(info.ok()) << info.status();
  auto [status, message] = PlainTransferHello(
      info->node().object_transfer_address(), cluster_->token());
  EXPECT_EQ(status, 4u) << message;  // refused
  EXPECT_THAT(message, AllOf(HasSubstr("uses TLS"), HasSubstr("--tls-ca")));
}

}  // namespace
