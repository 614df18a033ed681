// The head's dashboard port on a real two-node cluster: every path of the
// Jobs REST API (Ray's), the token on each of them, /metrics of the cluster
// and of an agent (checked by promtool, then scraped by a real Prometheus
// server whose query API must answer), and the page's token sign-in.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process.h"
#include "common/session.h"
#include "common/util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

int64_t Double(int64_t x) { return 2 * x; }
SHOAL_REMOTE(Double);

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::StartSuiteCluster;
using ::shoal::testing::StopSuiteCluster;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;

class DashboardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterSpec spec;
    spec.nodes = {{"dash-head", 2, ""}, {"dash-node", 2, ""}};
    spec.nodes[0].extra_args = {"--metrics-port", "0"};
    spec.nodes[1].extra_args = {"--metrics-port", "0"};
    StartSuiteCluster(spec, &cluster_);
  }
  static void TearDownTestSuite() { StopSuiteCluster(&cluster_); }

  static std::string SessionFile(size_t node, const std::string& name) {
    return shoal::ReadSessionFile(cluster_->session_dir(node), name);
  }
  // A client of the head's dashboard port, with the token unless `bare`.
  static std::unique_ptr<httplib::Client> Http(bool bare = false) {
    auto client = std::make_unique<httplib::Client>(
        "http://" + SessionFile(0, "dashboard_address"));
    client->set_read_timeout(30, 0);
    if (!bare) client->set_bearer_token_auth(cluster_->token());
    return client;
  }
  static nlohmann::json Json(const httplib::Result& r) {
    if (!r) return nlohmann::json();
    return nlohmann::json::parse(r->body, nullptr, false);
  }
  // GET /api/jobs/{id} until the job has ended (30 s at most).
  static nlohmann::json WaitEnded(const std::string& id) {
    nlohmann::json job;
    for (int i = 0; i < 300; ++i) {
      job = Json(Http()->Get("/api/jobs/" + id));
      if (job.is_object() && !job["end_time"].is_null()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return job;
  }

  static std::unique_ptr<TestCluster> cluster_;
};

std::unique_ptr<TestCluster> DashboardTest::cluster_;

TEST_F(DashboardTest, EveryPathNeedsTheToken) {
  auto bare = Http(/*bare=*/true);
  for (const char* path :
       {"/api/jobs/", "/api/jobs/x", "/api/jobs/x/logs", "/api/cluster_status",
        "/metrics", "/api/gangs", "/api/tasks", "/api/tasks?summary=1",
        "/api/logs?name=head.log"}) {
    auto r = bare->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_THAT(r->body, HasSubstr("Bearer")) << path;
  }
  EXPECT_EQ(bare->Post("/api/jobs/", "{}", "application/json")->status, 401);
  EXPECT_EQ(bare->Post("/api/jobs/x/stop")->status, 401);
  EXPECT_EQ(bare->Delete("/api/jobs/x")->status, 401);
  bare->set_bearer_token_auth("not-the-token");
  EXPECT_EQ(bare->Get("/api/jobs/")->status, 401);
  // An agent's metrics too.
  httplib::Client agent("http://" + SessionFile(1, "metrics_address"));
  EXPECT_EQ(agent.Get("/metrics")->status, 401);
}

TEST_F(DashboardTest, ThePagesStateApis) {
  auto http = Http();
  nlohmann::json gangs = Json(http->Get("/api/gangs"));
  ASSERT_TRUE(gangs.is_object()) << gangs.dump();
  EXPECT_TRUE(gangs.contains("started_total"));
  nlohmann::json tasks = Json(http->Get("/api/tasks?summary=1"));
  ASSERT_TRUE(tasks.is_object()) << tasks.dump();
  EXPECT_TRUE(tasks["state_counts"].contains("FINISHED"));
  // A log of the head's node, from its end; one of another node.
  nlohmann::json log = Json(http->Get("/api/logs?name=head.log&offset=-100"));
  ASSERT_TRUE(log.is_object()) << log.dump();
  EXPECT_LE(log["data"].get<std::string>().size(), 100u);
  EXPECT_GT(log["size"].get<int64_t>(), 0);
  log = Json(http->Get("/api/logs?node_id=dash-node&name=agent.log"));
  EXPECT_THAT(log["data"].get<std::string>(), HasSubstr("dash-node"));
  auto missing = http->Get("/api/logs?name=no-such.log");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto outside = http->Get("/api/logs?name=../token");
  ASSERT_TRUE(outside);
  EXPECT_EQ(outside->status, 400);
  auto bad = http->Get("/api/tasks?filter=colour%3Dred");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST_F(DashboardTest, TheJobsRestApi) {
  auto http = Http();
  nlohmann::json body = {
      {"entrypoint", "echo from rest; echo $GREETING"},
      {"submission_id", "rest-ok"},
      {"runtime_env", {{"env_vars", {{"GREETING", "hi there"}}}}}};
  auto submitted = http->Post("/api/jobs/", body.dump(), "application/json");
  ASSERT_TRUE(submitted);
  EXPECT_EQ(submitted->status, 200) << submitted->body;
  EXPECT_EQ(Json(submitted)["submission_id"], "rest-ok");

  nlohmann::json job = WaitEnded("rest-ok");
  EXPECT_EQ(job["status"], "SUCCEEDED") << job.dump();
  EXPECT_EQ(job["type"], "SUBMISSION");
  EXPECT_EQ(job["driver_exit_code"], 0);
  EXPECT_EQ(job["driver_node_id"], "dash-head");
  EXPECT_EQ(job["runtime_env"]["env_vars"]["GREETING"], "hi there");
  EXPECT_EQ(Json(http->Get("/api/jobs/rest-ok/logs"))["logs"],
            "from rest\nhi there\n");
  bool listed = false;
  for (const auto& j : Json(http->Get("/api/jobs/"))) {
    listed |= j["submission_id"] == "rest-ok";
  }
  EXPECT_TRUE(listed);

  // A failing one, with its exit code; a stopped one.
  http->Post(
      "/api/jobs/",
      nlohmann::json{{"entrypoint", "exit 4"}, {"submission_id", "rest-fails"}}
          .dump(),
      "application/json");
  job = WaitEnded("rest-fails");
  EXPECT_EQ(job["status"], "FAILED");
  EXPECT_EQ(job["driver_exit_code"], 4);
  http->Post("/api/jobs/",
             nlohmann::json{{"entrypoint", "sleep 300"},
                            {"submission_id", "rest-long"},
                            {"entrypoint_num_cpus", 1}}
                 .dump(),
             "application/json");
  auto stop = http->Post("/api/jobs/rest-long/stop");
  ASSERT_TRUE(stop);
  EXPECT_EQ(Json(stop)["stopped"], true) << stop->body;
  EXPECT_EQ(WaitEnded("rest-long")["status"], "STOPPED");

  // DELETE forgets an ended job.
  auto deleted = http->Delete("/api/jobs/rest-fails");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(Json(deleted)["deleted"], true);
  EXPECT_EQ(http->Get("/api/jobs/rest-fails")->status, 404);
}

TEST_F(DashboardTest, BadRequestsGetAClearAnswer) {
  auto http = Http();
  auto post = [&](const std::string& body) {
    return http->Post("/api/jobs/", body, "application/json");
  };
  auto r = post("not json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("JSON object"));
  r = post(R"({"submission_id": "x"})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("entrypoint"));
  r = post(R"({"entrypoint": "true", "runtime_env": {"pip": ["numpy"]}})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("not supported"));
  r = post(R"({"entrypoint": "true", "entrypoint_resources": {"TPU": 64}})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("no alive node"));
  r = post(R"({"entrypoint": "true", "submission_id": "dup"})");
  EXPECT_EQ(r->status, 200);
  r = post(R"({"entrypoint": "true", "submission_id": "dup"})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("exists already"));
  EXPECT_EQ(http->Get("/api/jobs/nobody")->status, 404);
  EXPECT_EQ(http->Post("/api/jobs/nobody/stop")->status, 404);
  WaitEnded("dup");
  // A running job cannot be deleted.
  post(R"({"entrypoint": "sleep 300", "submission_id": "running"})");
  r = http->Delete("/api/jobs/running");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("stop it first"));
  http->Post("/api/jobs/running/stop");
  WaitEnded("running");
}

// A port of 127.0.0.1 that nothing listens on now.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// `promtool check metrics` of `text`: its output ("" when it passes), or
// nullopt without promtool.
std::optional<std::string> Promtool(const std::string& text,
                                    const std::string& dir) {
  if (access("/usr/bin/promtool", X_OK) != 0) return std::nullopt;
  std::string in = dir + "/metrics.txt", out = dir + "/promtool.txt";
  std::ofstream(in) << text;
  std::string line = absl::StrCat("/usr/bin/promtool check metrics < ", in,
                                  " > ", out, " 2>&1");
  int rc = system(line.c_str());
  std::string said = shoal::ReadFile(out).value_or("");
  return rc == 0 ? said : absl::StrCat("exit ", rc, ": ", said);
}

TEST_F(DashboardTest, MetricsPassPromtoolAndARealPrometheusScrapesThem) {
  // Tasks to count: a driver runs 30, and its task events reach the head.
  cluster_->Connect();
  std::vector<shoal::ObjectRef<int64_t>> refs;
  for (int64_t i = 0; i < 30; ++i)
    refs.push_back(shoal::Task(Double).Remote(i));
  for (auto& r : refs) shoal::Get(r);
  shoal::Shutdown();

  auto http = Http();
  std::string dir = cluster_->root() + "/prometheus";
  std::filesystem::create_directories(dir);
  auto cluster_metrics = http->Get("/metrics");
  for (int i = 0; i < 100; ++i) {
    if (cluster_metrics &&
        absl::StrContains(cluster_metrics->body,
                          "shoal_tasks_ended_total{state=\"FINISHED\"} 30")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster_metrics = http->Get("/metrics");
  }
  ASSERT_TRUE(cluster_metrics);
  ASSERT_EQ(cluster_metrics->status, 200);
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_tasks_ended_total{state=\"FINISHED\"} 30"));
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_tasks{state=\"RUNNING\"} 0"));
  EXPECT_THAT(
      cluster_metrics->body,
      HasSubstr("shoal_node_heartbeat_age_seconds{node_id=\"dash-node\"}"));
  EXPECT_THAT(
      cluster_metrics->body,
      HasSubstr("shoal_rpc_server_latency_seconds_bucket{server=\"head\","
                "method=\"REGISTER_JOB\",le=\"+Inf\"}"));
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_rpc_server_requests_total{server=\"head\","
                        "method=\"REPORT_TASK_EVENTS\",outcome=\"ok\"}"));
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_launch_gangs_started_total"));
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_nodes{state=\"ALIVE\"} 2"));
  EXPECT_THAT(cluster_metrics->body,
              HasSubstr("shoal_node_resource_capacity{node_id=\"dash-node\","
                        "resource=\"CPU\"} 2"));
  httplib::Client agent("http://" + SessionFile(1, "metrics_address"));
  agent.set_bearer_token_auth(cluster_->token());
  auto agent_metrics = agent.Get("/metrics");
  ASSERT_TRUE(agent_metrics);
  ASSERT_EQ(agent_metrics->status, 200);
  EXPECT_THAT(
      agent_metrics->body,
      HasSubstr("shoal_object_store_capacity_bytes{node_id=\"dash-node\"}"));
  EXPECT_THAT(agent_metrics->body,
              HasSubstr("shoal_rpc_server_requests_total{server=\"agent\","
                        "node_id=\"dash-node\",method=\"GET_AGENT_INFO\""));
  std::optional<std::string> checked = Promtool(cluster_metrics->body, dir);
  ASSERT_TRUE(checked.has_value()) << "no /usr/bin/promtool: install Debian's "
                                      "prometheus (scripts/setup-deps "
                                      "does)";
  EXPECT_EQ(*checked, "") << cluster_metrics->body;
  EXPECT_EQ(*Promtool(agent_metrics->body, dir), "") << agent_metrics->body;

  // A real server scrapes the head and both agents with the token.
  std::string token_file = dir + "/token";
  std::ofstream(token_file) << cluster_->token();
  int port = FreePort();
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n"
      << "scrape_configs:\n"
      << "  - job_name: shoal\n"
      << "    authorization:\n      credentials_file: " << token_file << "\n"
      << "    static_configs:\n      - targets: ['"
      << SessionFile(0, "dashboard_address") << "', '"
      << SessionFile(0, "metrics_address") << "', '"
      << SessionFile(1, "metrics_address") << "']\n";
  shoal::SpawnOptions server;
  server.argv = {"/usr/bin/prometheus",
                 "--config.file=" + dir + "/prometheus.yml",
                 "--storage.tsdb.path=" + dir + "/data",
                 absl::StrCat("--web.listen-address=127.0.0.1:", port)};
  server.log_path = dir + "/prometheus.log";
  auto pid = shoal::Spawn(server);
  ASSERT_TRUE(pid.ok()) << pid.status();
  httplib::Client prometheus(absl::StrCat("http://127.0.0.1:", port));
  prometheus.set_connection_timeout(1, 0);
  prometheus.set_read_timeout(2, 0);
  nlohmann::json up, nodes, tasks;
  const std::string finished =
      "/api/v1/query?query=" +
      httplib::detail::encode_query_param(
          "shoal_tasks_ended_total{state=\"FINISHED\"}");
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    up = Json(prometheus.Get("/api/v1/query?query=sum(up)"));
    nodes = Json(prometheus.Get(
        "/api/v1/query?query=shoal_object_store_capacity_bytes"));
    tasks = Json(prometheus.Get(finished));
    if (up.is_object() && !up["data"]["result"].empty() &&
        up["data"]["result"][0]["value"][1] == "3" && nodes.is_object() &&
        nodes["data"]["result"].size() == 2 && tasks.is_object() &&
        !tasks["data"]["result"].empty()) {
      break;
    }
  }
  kill(*pid, SIGTERM);
  waitpid(*pid, nullptr, 0);
  ASSERT_TRUE(up.is_object())
      << shoal::ReadFile(dir + "/prometheus.log").value_or("");
  EXPECT_EQ(up["data"]["result"][0]["value"][1], "3") << up.dump();
  EXPECT_EQ(nodes["data"]["result"].size(), 2u) << nodes.dump();
  // The task counter, as Prometheus's query API returns it.
  ASSERT_TRUE(tasks.is_object() && !tasks["data"]["result"].empty())
      << tasks.dump();
  EXPECT_EQ(tasks["data"]["result"][0]["value"][1], "30") << tasks.dump();
}

TEST_F(DashboardTest, ThePageAsksForTheTokenAndKeepsItInACookie) {
  auto bare = Http(/*bare=*/true);
  auto login = bare->Get("/");
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 200);
  EXPECT_THAT(login->body, HasSubstr("needs its token"));
  auto wrong = bare->Get("/?token=wrong");
  EXPECT_EQ(wrong->status, 401);
  auto signed_in = bare->Get("/?token=" + cluster_->token());
  ASSERT_TRUE(signed_in);
  EXPECT_EQ(signed_in->status, 302);
  std::string cookie = signed_in->get_header_value("Set-Cookie");
  EXPECT_THAT(cookie, HasSubstr("HttpOnly"));
  std::string pair = cookie.substr(0, cookie.find(';'));
  auto page = bare->Get("/", {{"Cookie", pair}});
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, HasSubstr("<title>Shoal dashboard</title>"));
  auto api = bare->Get("/api/cluster_status", {{"Cookie", pair}});
  EXPECT_EQ(api->status, 200);
  EXPECT_THAT(api->body, HasSubstr("dash-node"));
}

}  // namespace
