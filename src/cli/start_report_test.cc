#include "cli/start_report.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

StartedNode Node() {
  StartedNode node;
  node.session_dir = "/tmp/t/session_1";
  node.head_address = "10.0.0.1:6379";
  node.node_id = "n1";
  node.agent_address = "10.0.0.1:40000";
  return node;
}

TEST(StartReportTest, TheDashboardUrlCarriesTheTokenEscaped) {
  EXPECT_EQ(DashboardLine("127.0.0.1:8265", "a b/c"),
            "http://127.0.0.1:8265/?token=a%20b%2Fc (REST API and /metrics: "
            "Authorization: Bearer <token>)");
  EXPECT_EQ(DashboardLine("", "t"), "not started (see the head's log)");
}

TEST(StartReportTest, AHeadSaysHowToJoinConnectSeeAndStop) {
  std::ostringstream out;
  ReportHeadStarted(Node(), "tok", "URL", out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("  Session folder: /tmp/t/session_1\n"));
  EXPECT_THAT(text, HasSubstr("  Node:           n1 at 10.0.0.1:40000\n"));
  EXPECT_THAT(text, HasSubstr("  Dashboard:      URL\n"));
  EXPECT_THAT(text, HasSubstr("  shoal start --address=10.0.0.1:6379 "
                              "--token=tok\n"));
  EXPECT_THAT(text, HasSubstr("(or set SHOAL_TOKEN=tok; on this host the "
                              "token is found automatically)"));
  EXPECT_THAT(text, HasSubstr("To connect a program:  "
                              "SHOAL_ADDRESS=10.0.0.1:6379 ./your_program\n"));
  EXPECT_THAT(text, HasSubstr("To stop:               shoal stop\n"));
}

TEST(StartReportTest, ATempDirAndTlsAreInEveryCommandPrinted) {
  StartedNode node = Node();
  node.temp_dir = "/my tmp";
  node.tls.ca = "/pki/ca.pem";
  node.tls.mutual = true;
  std::ostringstream out;
  ReportHeadStarted(node, "tok", "URL", out);
  const std::string text = out.str();
  EXPECT_THAT(text,
              HasSubstr("--token=tok --tls-ca /pki/ca.pem --tls-mutual\n"));
  EXPECT_THAT(text, HasSubstr("(or set SHOAL_TOKEN=tok)"));
  EXPECT_THAT(text, HasSubstr("SHOAL_ADDRESS=10.0.0.1:6379 "
                              "SHOAL_TEMP_DIR='/my tmp' "
                              "SHOAL_TLS_CA=/pki/ca.pem SHOAL_TLS_MUTUAL=1 "
                              "./your_program"));
  EXPECT_THAT(text, HasSubstr("shoal status --temp-dir '/my tmp' --tls-ca "
                              "/pki/ca.pem --tls-mutual\n"));
  EXPECT_THAT(text, HasSubstr("shoal stop --temp-dir '/my tmp'\n"));

  std::ostringstream agent;
  ReportAgentStarted(node, agent);
  EXPECT_EQ(agent.str(),
            "Shoal node agent started: node n1 at 10.0.0.1:40000 joined "
            "10.0.0.1:6379.\n  Session folder: /tmp/t/session_1\nTo see the "
            "cluster: shoal status --temp-dir '/my tmp' --tls-ca /pki/ca.pem "
            "--tls-mutual\nTo stop:            shoal stop --temp-dir '/my "
            "tmp'\n");
  EXPECT_THAT(TlsFlags(rpc::TlsConfig()), Not(HasSubstr("--tls")));
}

}  // namespace
}  // namespace shoal::cli
