// The head's dashboard port on a real two-node cluster: every path of the
// Jobs REST API (Ray's), the token on each of them, /metrics of the cluster
// and of an agent (checked by promtool, then scraped by a real Prometheus
// server whose query API must answer), the page's token sign-in, and what
// the port withstands: forged cross-site calls, framing, slow clients and
// huge bodies without the token.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/process.h"
#include "common/session.h"
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
using ::testing::Not;

class DashboardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterSpec spec;
    spec.nodes = {{"dash-head", 2, ""}, {"dash-node", 2, R"({"accel_x": 4})"}};
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

  // What the server answered to `request`, sent byte for byte (so with no
  // Content-Length unless it has one) on a connection of its own.
  struct RawAnswer {
    int status = 0;
    std::string head, body;
  };
  // A connection of its own to the dashboard port (-1 if none), whose
  // reads give up after 60 s.
  static int Connect() {
    std::string address = SessionFile(0, "dashboard_address");
    size_t colon = address.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::stoi(address.substr(colon + 1)));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval wait{60, 0};  // a server that never answers fails, not hangs
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  static RawAnswer Raw(const std::string& request) {
    RawAnswer answer;
    int fd = Connect();
    if (fd < 0) return answer;
    if (write(fd, request.data(), request.size()) !=
        static_cast<ssize_t>(request.size())) {
      close(fd);
      return answer;
    }
    // Until the body's Content-Length is in, or the server closes.
    std::string all;
    char buf[4096];
    size_t end = std::string::npos, length = std::string::npos;
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) {
      all.append(buf, n);
      if (end == std::string::npos) end = all.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      if (length == std::string::npos) {
        std::string head = absl::AsciiStrToLower(all.substr(0, end));
        size_t at = head.find("\r\ncontent-length: ");
        if (at == std::string::npos) continue;  // read to the close
        length = std::stoul(head.substr(at + 18));
      }
      if (all.size() >= end + 4 + length) break;
    }
    close(fd);
    if (all.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) {
      return answer;
    }
    answer.status = std::stoi(all.substr(9, 3));
    answer.head = all.substr(0, end);
    answer.body = all.substr(end + 4);
    return answer;
  }
  // A request line and the token, with nothing after the headers.
  static std::string Bodyless(const std::string& line) {
    return absl::StrCat(
        line, " HTTP/1.1\r\nHost: shoal\r\nAuthorization: ", "Bearer ",
        cluster_->token(), "\r\nConnection: close\r\n\r\n");
  }
  static nlohmann::json Submit(const nlohmann::json& body) {
    auto r = Http()->Post("/api/jobs/", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return Json(r);
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

// curl -X POST / -X DELETE send no Content-Length: such a request has no
// body, and is answered at once.
TEST_F(DashboardTest, RequestsWithoutABodyAreAnswered) {
  Submit({{"entrypoint", "sleep 300"}, {"submission_id", "bodyless"}});
  RawAnswer stop = Raw(Bodyless("POST /api/jobs/bodyless/stop"));
  EXPECT_EQ(stop.status, 200) << stop.head << stop.body;
  EXPECT_EQ(nlohmann::json::parse(stop.body, nullptr, false)["stopped"], true)
      << stop.body;
  EXPECT_EQ(WaitEnded("bodyless")["status"], "STOPPED");
  RawAnswer deleted = Raw(Bodyless("DELETE /api/jobs/bodyless"));
  EXPECT_EQ(deleted.status, 200) << deleted.head << deleted.body;
  EXPECT_EQ(nlohmann::json::parse(deleted.body, nullptr, false)["deleted"],
            true);
  EXPECT_EQ(Http()->Get("/api/jobs/bodyless")->status, 404);
  for (const char* path : {"/api/jobs/", "/api/jobs"}) {
    RawAnswer submit = Raw(Bodyless(absl::StrCat("POST ", path)));
    EXPECT_EQ(submit.status, 400) << path;
    nlohmann::json error = nlohmann::json::parse(submit.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << path << ": " << submit.body;
    EXPECT_THAT(error["error"].get<std::string>(),
                HasSubstr("\"entrypoint\" is required"));
  }
}

TEST_F(DashboardTest, TheJobListIsThereWithAndWithoutItsSlash) {
  auto http = Http();
  auto submitted = http->Post(
      "/api/jobs",
      nlohmann::json{{"entrypoint", "true"}, {"submission_id", "no-slash"}}
          .dump(),
      "application/json");
  ASSERT_TRUE(submitted);
  EXPECT_EQ(submitted->status, 200) << submitted->body;
  EXPECT_EQ(Json(submitted)["job_id"], "no-slash");  // Ray's, deprecated
  for (const char* path : {"/api/jobs", "/api/jobs/"}) {
    nlohmann::json list = Json(http->Get(path));
    ASSERT_TRUE(list.is_array()) << path << ": " << list.dump();
    bool listed = false;
    for (const auto& j : list) listed |= j["submission_id"] == "no-slash";
    EXPECT_TRUE(listed) << path;
  }
  WaitEnded("no-slash");
}

// Never an empty 4xx: unknown paths, wrong methods, bad requests and
// unsupported ones all say what is wrong in {"error": ...}.
TEST_F(DashboardTest, EveryErrorIsJsonThatSaysWhy) {
  auto http = Http();
  auto error_of = [](const httplib::Result& r) -> std::string {
    if (!r) return "(no answer)";
    nlohmann::json j = Json(r);
    if (!j.is_object() || !j["error"].is_string())
      return "(no error: " + r->body;
    return j["error"].get<std::string>();
  };
  auto r = http->Get("/api/no-such-thing");
  EXPECT_EQ(r->status, 404);
  EXPECT_THAT(error_of(r), HasSubstr("no such path: /api/no-such-thing"));
  r = http->Put("/api/jobs/", "{}", "application/json");
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, POST");
  EXPECT_THAT(error_of(r), HasSubstr("PUT is not allowed on /api/jobs/"));
  r = http->Get("/api/jobs/x/stop");
  EXPECT_EQ(r->status, 405);
  EXPECT_THAT(error_of(r), HasSubstr("use POST"));
  r = http->Post("/api/jobs/x", "{}", "application/json");
  EXPECT_EQ(r->status, 405);
  EXPECT_THAT(error_of(r), HasSubstr("use GET, DELETE"));
  r = http->Get("/api/jobs/x/logs/tail");
  EXPECT_EQ(r->status, 501);
  EXPECT_THAT(error_of(r), HasSubstr("?offset="));
  r = http->Post("/api/jobs/", "{\"entrypoint\": ", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(error_of(r), HasSubstr("JSON object"));
  // A shell would run only what comes before a NUL: refused, not cut.
  r = http->Post("/api/jobs/",
                 R"({"entrypoint": "echo safe\u0000; touch /tmp/x"})",
                 "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(error_of(r), HasSubstr("NUL byte"));
  r = http->Post("/api/jobs/",
                 R"({"entrypoint": "true", "metadata": {"n": 1}})",
                 "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(error_of(r), HasSubstr("\"metadata.n\" must be a string"));
  r = http->Get("/api/jobs/nobody/logs");
  EXPECT_EQ(r->status, 404);
  EXPECT_THAT(error_of(r), HasSubstr("nobody"));
  r = http->Get("/api/jobs/x/logs?tail=lots");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(error_of(r), HasSubstr("?tail=lots must be a whole number"));
  // What the HTTP layer refuses before any route: an unreadable request.
  RawAnswer garbled = Raw("NOT-HTTP\r\n\r\n");
  EXPECT_EQ(garbled.status, 400) << garbled.head;
  nlohmann::json error = nlohmann::json::parse(garbled.body, nullptr, false);
  ASSERT_TRUE(error.is_object()) << garbled.body;
  EXPECT_THAT(error["error"].get<std::string>(),
              HasSubstr("could not be read"));
}

// metadata, runtime_env and the entrypoint's resources come back as given,
// in Ray's fields, from GET /api/jobs/{id} and the list; the node is one
// that has them (accel_x is dash-node's).
TEST_F(DashboardTest, JobsKeepWhatTheSubmitterGave) {
  Submit({{"entrypoint", "echo $GREETING"},
          {"submission_id", "as-given"},
          {"metadata", {{"owner", "ana"}, {"run", "7"}}},
          {"runtime_env", {{"env_vars", {{"GREETING", "hello"}}}}},
          {"entrypoint_num_cpus", 1},
          {"entrypoint_num_gpus", 0},
          {"entrypoint_memory", 1024},
          {"entrypoint_resources", {{"accel_x", 1}}}});
  nlohmann::json job = WaitEnded("as-given");
  EXPECT_EQ(job["status"], "SUCCEEDED") << job.dump();
  EXPECT_EQ(job["driver_node_id"], "dash-node");
  nlohmann::json listed;
  for (const auto& j : Json(Http()->Get("/api/jobs/"))) {
    if (j["submission_id"] == "as-given") listed = j;
  }
  for (const nlohmann::json& j : {job, listed}) {
    EXPECT_EQ(j["metadata"], (nlohmann::json{{"owner", "ana"}, {"run", "7"}}));
    EXPECT_EQ(j["runtime_env"],
              (nlohmann::json{{"env_vars", {{"GREETING", "hello"}}}}));
    EXPECT_EQ(j["entrypoint_num_cpus"], 1.0);
    EXPECT_TRUE(j["entrypoint_num_gpus"].is_null());
    EXPECT_EQ(j["entrypoint_memory"], 1024);
    EXPECT_EQ(j["entrypoint_resources"], (nlohmann::json{{"accel_x", 1.0}}));
    EXPECT_EQ(j["driver_exit_code"], 0);
  }
  EXPECT_EQ(Json(Http()->Get("/api/jobs/as-given/logs"))["logs"], "hello\n");
  // The page's node table draws every resource of /api/cluster_status.
  EXPECT_THAT(Http()->Get("/api/cluster_status")->body, HasSubstr("accel_x"));
}

// A job's output is any bytes: the JSON form answers 200 with U+FFFD for
// what is not UTF-8, the text form the bytes themselves; answers are
// windows of at most what was asked (1 MiB by default).
TEST_F(DashboardTest, LogsAreBoundedAndServeAnyBytes) {
  auto http = Http();
  Submit({{"entrypoint", R"(printf 'caf\351 ok\n'; printf 'nul\000byte\n')"},
          {"submission_id", "bytes"}});
  EXPECT_EQ(WaitEnded("bytes")["status"], "SUCCEEDED");
  const std::string raw("caf\xe9 ok\nnul\0byte\n", 17);
  auto r = http->Get("/api/jobs/bytes/logs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  nlohmann::json logs = Json(r);
  EXPECT_EQ(logs["logs"], std::string("caf\xef\xbf\xbd ok\nnul\0byte\n", 19));
  EXPECT_EQ(logs["offset"], 0);
  EXPECT_EQ(logs["next_offset"], 17);
  EXPECT_EQ(logs["size"], 17);
  EXPECT_EQ(logs["truncated"], false);
  r = http->Get("/api/jobs/bytes/logs?format=text");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, raw);
  EXPECT_EQ(r->get_header_value("X-Shoal-Log-Next-Offset"), "17");
  r = http->Get("/api/jobs/bytes/logs", {{"Accept", "text/plain"}});
  EXPECT_EQ(r->body, raw);
  // Windows: from an offset, and the tail.
  logs = Json(http->Get("/api/jobs/bytes/logs?offset=4&limit=3"));
  EXPECT_EQ(logs["logs"], " ok");
  EXPECT_EQ(logs["next_offset"], 7);
  EXPECT_EQ(logs["truncated"], true);
  logs = Json(http->Get("/api/jobs/bytes/logs?tail=5"));
  EXPECT_EQ(logs["logs"], "byte\n");
  EXPECT_EQ(logs["offset"], 12);
  EXPECT_EQ(http->Get("/api/jobs/bytes/logs?tail=5&format=text")->body,
            "byte\n");

  // A window never ends inside a character: "€€" is 6 bytes, a window of
  // 4 answers the first (3 bytes) and the next one starts on the second.
  Submit({{"entrypoint", "printf '\\342\\202\\254\\342\\202\\254'"},
          {"submission_id", "euros"}});
  EXPECT_EQ(WaitEnded("euros")["status"], "SUCCEEDED");
  logs = Json(http->Get("/api/jobs/euros/logs?offset=0&limit=4"));
  EXPECT_EQ(logs["logs"], "\xe2\x82\xac");
  EXPECT_EQ(logs["next_offset"], 3);
  logs = Json(http->Get("/api/jobs/euros/logs?offset=3"));
  EXPECT_EQ(logs["logs"], "\xe2\x82\xac");

  // 3 MB of output: the default answer is its last MiB, never all of it.
  Submit({{"entrypoint",
           "head -c 3000000 /dev/zero | tr '\\000' x; echo; echo END"},
          {"submission_id", "big"}});
  EXPECT_EQ(WaitEnded("big")["status"], "SUCCEEDED");
  const int64_t size = 3000000 + 5;
  logs = Json(http->Get("/api/jobs/big/logs"));
  ASSERT_TRUE(logs.is_object());
  EXPECT_EQ(logs["logs"].get<std::string>().size(), 1u << 20);
  EXPECT_TRUE(absl::EndsWith(logs["logs"].get<std::string>(), "xx\nEND\n"));
  EXPECT_EQ(logs["offset"], size - (1 << 20));
  EXPECT_EQ(logs["size"], size);
  EXPECT_EQ(logs["truncated"], true);
  logs = Json(http->Get("/api/jobs/big/logs?offset=0"));
  EXPECT_EQ(logs["next_offset"], 1 << 20);
  EXPECT_EQ(
      http->Get("/api/jobs/big/logs?offset=0&limit=100&format=text")->body,
      std::string(100, 'x'));
  EXPECT_EQ(http->Get("/api/jobs/big/logs?limit=99999999999")->status, 400);
}

// An entrypoint may hold any bytes (`shoal job submit` passes argv as it
// is): the REST API and the CLI's JSON both answer, with U+FFFD.
TEST_F(DashboardTest, AnEntrypointOfAnyBytesIsValidJson) {
  const std::vector<std::string> env = {"SHOAL_ADDRESS=" + cluster_->address(),
                                        "SHOAL_TOKEN=" + cluster_->token()};
  std::string out;
  ASSERT_EQ(
      shoal::testing::RunCli({"job", "submit", "--no-wait", "--submission-id",
                              "raw-entry", "--", "echo", "caf\xe9"},
                             &out, env),
      0)
      << out;
  nlohmann::json job = WaitEnded("raw-entry");
  EXPECT_EQ(job["status"], "SUCCEEDED") << job.dump();
  EXPECT_THAT(job["entrypoint"].get<std::string>(),
              HasSubstr("caf\xef\xbf\xbd"));
  auto list = Http()->Get("/api/jobs/");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  EXPECT_EQ(Json(Http()->Get("/api/jobs/raw-entry/logs"))["logs"],
            "caf\xef\xbf\xbd\n");
  for (const char* command : {"status", "list"}) {
    std::vector<std::string> args = {"job", command, "--format", "json"};
    if (std::string(command) == "status") args.push_back("raw-entry");
    EXPECT_EQ(shoal::testing::RunCli(args, &out, env), 0) << command << out;
    EXPECT_THAT(out, HasSubstr("caf\xef\xbf\xbd")) << command;
  }
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
  EXPECT_THAT(login->body, Not(HasSubstr("not this cluster's")));
  // A wrong token is told so.
  auto wrong = bare->Get("/?token=wrong");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_THAT(wrong->body, HasSubstr("not this cluster's"));
  EXPECT_THAT(wrong->body, HasSubstr("shoal start --head"));
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

// The cookie that the page's sign-in sets: "shoal_token=...".
std::string SignInCookie(httplib::Client& bare, const std::string& token) {
  auto signed_in = bare.Get("/?token=" + token);
  if (!signed_in) return "";
  std::string cookie = signed_in->get_header_value("Set-Cookie");
  return cookie.substr(0, cookie.find(';'));
}

// A page on another port of this host (SameSite=Strict does not separate
// ports) auto-posts a text/plain form to the Jobs API with the signed-in
// user's cookie: refused, and no job runs. Bearer calls (Ray's clients) and
// the page's own calls still work.
TEST_F(DashboardTest, APageOfAnotherOriginCannotRunAJob) {
  std::string address = SessionFile(0, "dashboard_address");
  auto bare = Http(/*bare=*/true);
  std::string cookie = SignInCookie(*bare, cluster_->token());
  ASSERT_THAT(cookie, HasSubstr("shoal_token="));
  auto post = [&](const std::string& id, const std::string& headers,
                  const std::string& content_type) {
    std::string body = nlohmann::json{
        {"entrypoint", "echo forged"},
        {"submission_id",
         id}}.dump();
    return Raw(absl::StrCat(
        "POST /api/jobs/ HTTP/1.1\r\nHost: ", address, "\r\nCookie: ", cookie,
        "\r\n", headers,
        content_type.empty() ? "" : "Content-Type: ", content_type,
        content_type.empty() ? "" : "\r\n", "Content-Length: ", body.size(),
        "\r\nConnection: close\r\n\r\n", body));
  };
  auto error_of = [](const RawAnswer& a) {
    nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    return j.is_object() && j["error"].is_string()
               ? j["error"].get<std::string>()
               : "(no error: " + a.body;
  };
  // What the form sends: its site's Origin, text/plain, the cookie.
  RawAnswer form =
      post("forged-form", "Origin: http://127.0.0.1:1\r\n", "text/plain");
  EXPECT_EQ(form.status, 403) << form.head << form.body;
  EXPECT_THAT(error_of(form), HasSubstr("http://127.0.0.1:1"));
  // Without an Origin (older browsers, some redirects): no X-Shoal-Request.
  RawAnswer no_origin = post("forged-bare", "", "text/plain");
  EXPECT_EQ(no_origin.status, 403) << no_origin.body;
  EXPECT_THAT(error_of(no_origin), HasSubstr("X-Shoal-Request: 1"));
  RawAnswer json_no_header = post("forged-json", "", "application/json");
  EXPECT_EQ(json_no_header.status, 403) << json_no_header.body;
  // The header, but a body type that a form could send: 415.
  RawAnswer typed = post("forged-typed", "X-Shoal-Request: 1\r\n",
                         "application/x-www-form-urlencoded");
  EXPECT_EQ(typed.status, 415) << typed.body;
  EXPECT_THAT(error_of(typed), HasSubstr("application/json"));
  // Stop and delete are guarded the same way.
  Submit({{"entrypoint", "sleep 300"}, {"submission_id", "csrf-target"}});
  RawAnswer stop = Raw(absl::StrCat(
      "POST /api/jobs/csrf-target/stop HTTP/1.1\r\nHost: ", address,
      "\r\nCookie: ", cookie,
      "\r\nOrigin: http://127.0.0.1:1\r\nContent-Type: text/plain\r\n"
      "Content-Length: 0\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(stop.status, 403) << stop.body;
  EXPECT_TRUE(Json(Http()->Get("/api/jobs/csrf-target"))["end_time"].is_null());
  // None of them ran.
  for (const char* id :
       {"forged-form", "forged-bare", "forged-json", "forged-typed"}) {
    EXPECT_EQ(Http()->Get(absl::StrCat("/api/jobs/", id))->status, 404) << id;
  }
  // The page's own call: the cookie, its header and its own Origin.
  RawAnswer page = post(
      "page-call",
      absl::StrCat("X-Shoal-Request: 1\r\nOrigin: http://", address, "\r\n"),
      "application/json");
  EXPECT_EQ(page.status, 200) << page.body;
  // Ray's clients: the Bearer header, with JSON, with no content type, or
  // with the form type that `curl -d` sends.
  Submit({{"entrypoint", "true"}, {"submission_id", "bearer-call"}});
  auto curl_d = Http()->Post(
      "/api/jobs/",
      nlohmann::json{{"entrypoint", "true"}, {"submission_id", "curl-d"}}
          .dump(),
      "application/x-www-form-urlencoded");
  ASSERT_TRUE(curl_d);
  EXPECT_EQ(curl_d->status, 200) << curl_d->body;
  auto stopped = Http()->Post("/api/jobs/csrf-target/stop");
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->status, 200) << stopped->body;
  EXPECT_EQ(WaitEnded("csrf-target")["status"], "STOPPED");
  WaitEnded("page-call");
  WaitEnded("bearer-call");
  WaitEnded("curl-d");
}

// The pages may not be framed (clickjacking), run only their own script,
// and no answer is sniffed as another type.
TEST_F(DashboardTest, ThePagesRefuseFramesAndForeignScripts) {
  auto bare = Http(/*bare=*/true);
  std::string cookie = SignInCookie(*bare, cluster_->token());
  auto page = bare->Get("/", {{"Cookie", cookie}});
  auto login = bare->Get("/");
  auto api = Http()->Get("/api/jobs/");
  ASSERT_TRUE(page && login && api);
  ASSERT_THAT(page->body, HasSubstr("<title>Shoal dashboard</title>"));
  for (const auto* r : {&page.value(), &login.value(), &api.value()}) {
    EXPECT_EQ(r->get_header_value("X-Frame-Options"), "DENY");
    EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(r->get_header_value_count("Content-Security-Policy"), 1u);
    EXPECT_THAT(r->get_header_value("Content-Security-Policy"),
                HasSubstr("frame-ancestors 'none'"));
  }
  std::string policy = page->get_header_value("Content-Security-Policy");
  EXPECT_THAT(policy, HasSubstr("script-src 'sha256-"));
  EXPECT_THAT(policy, Not(HasSubstr("script-src 'unsafe-inline'")));
  // The page's calls carry the header that lets them change things.
  EXPECT_TRUE(absl::StrContains(page->body, "\"X-Shoal-Request\": \"1\""))
      << "the page's calls do not send X-Shoal-Request";
}

// Slowloris: 20 clients each send a request's headers one byte every 3 s
// (and give up after 15 s). The API still answers at once, and the server
// closes them when their headers are late.
TEST_F(DashboardTest, SlowClientsDoNotStallTheApi) {
  constexpr int kSlow = 20;
  constexpr auto kGiveUp = std::chrono::seconds(15);
  std::vector<std::thread> slow;
  std::atomic<int> connected = 0, closed_by_server = 0;
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back([&] {
      int fd = Connect();
      if (fd < 0) return;
      const std::string start = "GET /api/jobs/ HTTP/1.1\r\nHost: shoal\r\n";
      if (write(fd, start.data(), start.size()) < 0) {
        close(fd);
        return;
      }
      ++connected;
      auto begin = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - begin < kGiveUp) {
        if (send(fd, "X", 1, MSG_NOSIGNAL) < 0) {
          ++closed_by_server;
          break;
        }
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 3000) > 0) {  // an answer (408) or the close
          ++closed_by_server;
          break;
        }
      }
      close(fd);
    });
  }
  while (connected < kSlow) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto begin = std::chrono::steady_clock::now();
  auto jobs = Http()->Get("/api/jobs/");
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  std::printf("GET /api/jobs/ with %d slow clients connected: %.3f s\n", kSlow,
              took);
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_LT(took, 10.0) << "the API waited for the slow clients to give up";
  for (std::thread& t : slow) t.join();
  std::printf("slow clients closed by the server before giving up: %d of %d\n",
              closed_by_server.load(), kSlow);
  EXPECT_EQ(closed_by_server, kSlow);
}

// The head's resident and peak memory, in KiB, from /proc.
std::pair<int64_t, int64_t> HeadMemoryKiB(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  int64_t rss = -1, peak = -1;
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "VmRSS:")) rss = std::atoll(line.c_str() + 6);
    if (absl::StartsWith(line, "VmHWM:")) peak = std::atoll(line.c_str() + 6);
  }
  return {rss, peak};
}

// Four unauthenticated POSTs that say they carry 500 MB each: refused from
// their headers, before the head reads their bodies; its memory stays put.
TEST_F(DashboardTest, AHugeBodyWithoutTheTokenIsNeverRead) {
  int pid = std::stoi(SessionFile(0, "head.pid"));
  auto [rss_before, peak_before] = HeadMemoryKiB(pid);
  ASSERT_GT(rss_before, 0);
  constexpr int64_t kClaimed = int64_t{500} << 20;
  struct Outcome {
    int status = 0;
    int64_t sent = 0;
  };
  // Sends the headers, then the body 64 KiB at a time until the server
  // answers (or all of it went, or 60 s passed).
  auto huge_post = [&](const std::string& credential) {
    Outcome outcome;
    int fd = Connect();
    if (fd < 0) return outcome;
    timeval wait{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
    std::string head = absl::StrCat(
        "POST /api/jobs/ HTTP/1.1\r\nHost: shoal\r\n", credential,
        "Content-Type: application/json\r\nContent-Length: ", kClaimed,
        "\r\n\r\n");
    std::string chunk(64 << 10, 'a');
    auto begin = std::chrono::steady_clock::now();
    if (write(fd, head.data(), head.size()) > 0) {
      while (outcome.sent < kClaimed &&
             std::chrono::steady_clock::now() - begin <
                 std::chrono::seconds(60)) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 0) > 0) break;
        ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        outcome.sent += n;
      }
      char answer[64] = {};
      if (read(fd, answer, sizeof(answer) - 1) > 12 &&
          absl::StartsWith(answer, "HTTP/1.1 ")) {
        outcome.status = std::atoi(answer + 9);
      }
    }
    close(fd);
    return outcome;
  };
  std::vector<Outcome> outcomes(4);
  std::vector<std::thread> posts;
  for (Outcome& outcome : outcomes) {
    posts.emplace_back([&] { outcome = huge_post(""); });
  }
  for (std::thread& t : posts) t.join();
  auto [rss_after, peak_after] = HeadMemoryKiB(pid);
  std::printf(
      "head memory around 4 unauthenticated 500 MB POSTs: RSS %lld -> %lld "
      "KiB, peak %lld -> %lld KiB\n",
      static_cast<long long>(rss_before), static_cast<long long>(rss_after),
      static_cast<long long>(peak_before), static_cast<long long>(peak_after));
  for (const Outcome& outcome : outcomes) {
    std::printf("  answered %d after %lld body bytes were sent\n",
                outcome.status, static_cast<long long>(outcome.sent));
    EXPECT_EQ(outcome.status, 401);
    // What the sockets' buffers take before the head answers, not 500 MB.
    EXPECT_LT(outcome.sent, int64_t{64} << 20);
  }
  // Growth, not the absolute figure: what the head holds before depends on
  // the tests that ran ahead of this one and on the allocator.
  EXPECT_LT(peak_after - peak_before, 64 << 10);  // KiB
  EXPECT_LT(rss_after - rss_before, 64 << 10);    // KiB
  // With the token, a Content-Length over the cap is refused from the
  // header alone.
  Outcome over = huge_post(
      absl::StrCat("Authorization: Bearer ", cluster_->token(), "\r\n"));
  EXPECT_EQ(over.status, 413);
  EXPECT_LT(over.sent, int64_t{64} << 20);
  EXPECT_EQ(Http()->Get("/api/jobs/")->status, 200);
}

}  // namespace
