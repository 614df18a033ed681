#include "dashboard/dashboard.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/utf8.h"
#include "dashboard/admission.h"
#include "dashboard/assets.h"
#include "dashboard/formats.h"
#include "dashboard/http_server.h"
#include "dashboard/job_submit.h"
#include "google/protobuf/util/json_util.h"
#include "head_client/head_client.h"
#include "presentation/status_format.h"
#include "rpc/blocking_channel.h"
#include "rpc/event_loop.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::dashboard {
namespace {

// Every answer but the pages: nothing in it may run, load or be framed.
constexpr char kApiPolicy[] = "default-src 'none'; frame-ancestors 'none'";
constexpr size_t kMaxBodyBytes = 16 << 20;  // a job submission is far less

// A page's own Content-Security-Policy, in place of kApiPolicy.
void SetPagePolicy(httplib::Response& res, const std::string& policy) {
  res.headers.erase("Content-Security-Policy");
  res.set_header("Content-Security-Policy", policy);
}

void SendJson(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

// {"error": what}: every answer that is not a success has a body that
// says what went wrong (invalid UTF-8 in `what` as U+FFFD).
void SendError(httplib::Response& res, int status, const std::string& what) {
  SendJson(res, status, JsonText({{"error", what}}) + "\n");
}

// The paths served, with their methods: what a 404 from the router means
// (a known path asked with another method is a 405 that names the right
// ones).
struct Route {
  const char* pattern;
  const char* methods;
};
constexpr Route kRoutes[] = {
    {"/", "GET"},
    {"/api/cluster_status", "GET"},
    {"/metrics", "GET"},
    {"/api/gangs", "GET"},
    {"/api/tasks", "GET"},
    {"/api/logs", "GET"},
    {"/api/jobs/?", "GET, POST"},
    {"/api/jobs/[^/]+", "GET, DELETE"},
    {"/api/jobs/[^/]+/logs", "GET"},
    {"/api/jobs/[^/]+/logs/tail", "GET"},
    {"/api/jobs/[^/]+/stop", "POST"},
};

// The body of an answer the router or the HTTP layer made without one.
void DescribeError(const httplib::Request& req, httplib::Response& res) {
  if (res.status == 404) {
    for (const Route& route : kRoutes) {
      if (std::regex_match(req.path, std::regex(route.pattern))) {
        res.status = 405;
        res.set_header("Allow", route.methods);
        return SendError(res, 405,
                         absl::StrCat(req.method, " is not allowed on ",
                                      req.path, ": use ", route.methods));
      }
    }
    return SendError(
        res, 404,
        absl::StrCat("no such path: ", req.path,
                     " (the Jobs REST API is under /api/jobs/; see "
                     "docs/design/jobs.md)"));
  }
  switch (res.status) {
    case 400:
      return SendError(res, 400,
                       "the request could not be read: send a well-formed "
                       "HTTP/1.1 request (GET, POST or DELETE; a body with "
                       "Content-Length or chunked encoding)");
    case 413:
      return SendError(res, 413,
                       absl::StrCat("the body is over ", kMaxBodyBytes >> 20,
                                    " MiB: send less"));
    case 414:
      return SendError(res, 414, "the path and query are too long");
    case 416:
      return SendError(res, 416,
                       "the Range header is not one this server can serve: "
                       "leave it out");
    default:
      return SendError(res, res.status,
                       absl::StrCat("the ", req.method, " of ", req.path,
                                    " was refused (HTTP ", res.status, ")"));
  }
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return 401;
    default:
      return 500;
  }
}

void SendStatus(httplib::Response& res, const absl::Status& status) {
  SendError(res, HttpStatus(status), std::string(status.message()));
}

class DashboardImpl : public Dashboard {
 public:
  explicit DashboardImpl(DashboardOptions options)
      : options_(std::move(options)) {}

  ~DashboardImpl() override {
    if (server_ == nullptr) return;
    server_->stop();  // and, before listen returns, every handler ends
    if (thread_.joinable()) thread_.join();
    if (loop_ != nullptr) {
      head_.reset();  // closes on the loop
      loop_->Stop();
    }
  }

  absl::Status Start() {
    HttpLimits limits{.max_body_bytes = kMaxBodyBytes};
    // An agent's port serves only /metrics, to a scraper or two.
    if (options_.head_address.empty()) limits.workers = 4;
    auto server = HttpServer::Create(limits);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    if (!options_.head_address.empty()) {
      auto loop = rpc::EventLoop::Create("shoal-dashboard");
      if (!loop.ok()) return loop.status();
      loop_ = std::move(*loop);
      head_ = std::make_unique<rpc::HeadClient>(
          loop_.get(), options_.head_address, options_.token, "dashboard");
      Routes();
    } else {
      server_->Get("/metrics", [this](const auto& req, auto& res) {
        AgentMetricsPage(res);
      });
    }
    server_->set_exception_handler(
        [](const auto&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          SendError(res, 500, what);
        });
    server_->set_error_handler(HttpServer::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          DescribeError(req, res);
          return httplib::Server::HandlerResponse::Handled;
        }));
    server_->set_admission_handler(
        [this](const httplib::Request& req, httplib::Response& res) {
          return Admit(req, res);
        });
    server_->set_default_headers({{"X-Content-Type-Options", "nosniff"},
                                  {"X-Frame-Options", "DENY"},
                                  {"Content-Security-Policy", kApiPolicy},
                                  {"Referrer-Policy", "no-referrer"}});
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.host);
    } else if (server_->bind_to_port(options_.host, options_.port)) {
      port_ = options_.port;
    }
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ",
                                                 options_.host, ":",
                                                 options_.port, " (in use?)"));
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  // Runs once a request's headers are in, before any byte of its body is
  // read (HttpServer); admission.h says what is refused. Handled: refused,
  // with the answer in `res`.
  httplib::Server::HandlerResponse Admit(const httplib::Request& req,
                                         httplib::Response& res) {
    const bool sign_in_page = req.path == "/" &&
                              !options_.head_address.empty() &&
                              (req.method == "GET" || req.method == "HEAD");
    std::optional<Refusal> refusal =
        CheckAdmission(req, options_.token, sign_in_page);
    if (!refusal.has_value())
      return httplib::Server::HandlerResponse::Unhandled;
    SHOAL_LOG(WARNING) << "dashboard: refused " << req.method << " " << req.path
                       << " from " << req.remote_addr << " ("
                       << (refusal->status == 401 ? "no or wrong token"
                                                  : refusal->why)
                       << ")";
    SendError(res, refusal->status, refusal->why);
    return httplib::Server::HandlerResponse::Handled;
  }

  void Routes() {
    server_->Get("/", [this](const httplib::Request& req,
                             httplib::Response& res) { ServeIndex(req, res); });
    server_->Get("/api/cluster_status", [this](const auto& req, auto& res) {
      auto status = head_->ClusterStatus(5000);
      if (!status.ok()) return SendStatus(res, status.status());
      SendJson(res, 200, internal::FormatStatusJson(*status));
    });
    server_->Get("/metrics",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   ServeMetrics(req, res);
                 });
    // What the page shows beside the cluster status.
    server_->Get("/api/gangs", [this](const auto& req, auto& res) {
      auto gangs = head_->ListGangs();
      if (!gangs.ok()) return SendStatus(res, gangs.status());
      SendJson(res, 200, ProtoJson(*gangs));
    });
    server_->Get("/api/tasks",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   ServeTasks(req, res);
                 });
    // GET /api/logs?node_id=N&name=NAME[&offset=O]: a log of a node (a
    // negative offset: that many bytes before its end).
    server_->Get("/api/logs",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   ServeLogs(req, res);
                 });
    // The Jobs REST API, with Ray's paths (the list with or without its
    // trailing slash).
    server_->Get("/api/jobs/?", [this](const auto& req, auto& res) {
      auto jobs = head_->ListJobs();
      if (!jobs.ok()) return SendStatus(res, jobs.status());
      SendJson(res, 200, JobListJson(*jobs));
    });
    server_->Post("/api/jobs/?",
                  [this](const auto& req, auto& res) { SubmitJob(req, res); });
    server_->Get(R"(/api/jobs/([^/]+))", [this](const auto& req, auto& res) {
      auto job = head_->GetJob(Ref(req));
      if (!job.ok()) return SendStatus(res, job.status());
      SendJson(res, 200, JobJson(*job));
    });
    server_->Get(R"(/api/jobs/([^/]+)/logs)",
                 [this](const auto& req, auto& res) { JobLogs(req, res); });
    server_->Get(R"(/api/jobs/([^/]+)/logs/tail)",
                 [this](const auto& req, auto& res) {
                   SendError(res, 501,
                             "logs/tail (Ray's websocket) is not served: poll "
                             "GET /api/jobs/{id}/logs?offset=N with the "
                             "next_offset of the answer before");
                 });
    server_->Post(R"(/api/jobs/([^/]+)/stop)", [this](const auto& req,
                                                      auto& res) {
      auto job = head_->StopJob(Ref(req));
      if (!job.ok()) return SendStatus(res, job.status());
      bool stopping = job->end_time_ms() == 0;
      SendJson(res, 200, nlohmann::json{{"stopped", stopping}}.dump() + "\n");
    });
    server_->Delete(R"(/api/jobs/([^/]+))", [this](const auto& req, auto& res) {
      absl::Status deleted = head_->DeleteJob(Ref(req));
      if (!deleted.ok()) return SendStatus(res, deleted);
      SendJson(res, 200, nlohmann::json{{"deleted", true}}.dump() + "\n");
    });
  }

  void ServeIndex(const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("token")) {
      if (!SameToken(req.get_param_value("token"), options_.token)) {
        res.status = 401;
        SetPagePolicy(res, LoginPagePolicy());
        res.set_content(LoginPage(/*wrong_token=*/true), "text/html");
        return;
      }
      res.set_header("Set-Cookie",
                     absl::StrCat(kTokenCookie, "=", options_.token,
                                  "; Path=/; HttpOnly; SameSite=Strict"));
      res.set_redirect("/");
      return;
    }
    if (!SameToken(CookieToken(req), options_.token)) {
      SetPagePolicy(res, LoginPagePolicy());
      res.set_content(LoginPage(/*wrong_token=*/false), "text/html");
      return;
    }
    SetPagePolicy(res, DashboardPagePolicy());
    res.set_content(kDashboardPage, "text/html");
  }

  void ServeMetrics(const httplib::Request& req, httplib::Response& res) {
    auto status = head_->ClusterStatus(5000);
    if (!status.ok()) return SendStatus(res, status.status());
    auto jobs = head_->ListJobs();
    if (!jobs.ok()) return SendStatus(res, jobs.status());
    proto::ListTasksRequest counts;
    counts.set_counts_only(true);
    auto tasks = head_->ListTasks(counts);
    if (!tasks.ok()) return SendStatus(res, tasks.status());
    auto gangs = head_->ListGangs();
    if (!gangs.ok()) return SendStatus(res, gangs.status());
    auto rpc = head_->ServerStats();
    if (!rpc.ok()) return SendStatus(res, rpc.status());
    res.set_content(ClusterMetrics({.status = &*status,
                                    .jobs = &*jobs,
                                    .tasks = &*tasks,
                                    .gangs = &*gangs,
                                    .rpc = &*rpc}),
                    "text/plain; version=0.0.4");
  }

  void ServeTasks(const httplib::Request& req, httplib::Response& res) {
    proto::ListTasksRequest list;
    for (size_t i = 0; i < req.get_param_value_count("filter"); ++i) {
      list.add_filters(req.get_param_value("filter", i));
    }
    list.set_summary(req.has_param("summary"));
    if (req.has_param("limit")) {
      list.set_limit(std::atoi(req.get_param_value("limit").c_str()));
    }
    auto tasks = head_->ListTasks(list);
    if (!tasks.ok()) return SendStatus(res, tasks.status());
    SendJson(res, 200, ProtoJson(*tasks));
  }

  void ServeLogs(const httplib::Request& req, httplib::Response& res) {
    proto::ReadLogRequest read;
    read.set_node_id(req.get_param_value("node_id"));
    read.set_name(req.get_param_value("name"));
    if (req.has_param("offset")) {
      read.set_offset(std::atoll(req.get_param_value("offset").c_str()));
    }
    auto chunk = head_->ReadLog(read);
    if (!chunk.ok()) return SendStatus(res, chunk.status());
    SendJson(res, 200,
             JsonText({{"data", chunk->data()},
                       {"next_offset", chunk->next_offset()},
                       {"size", chunk->size()}}) +
                 "\n");
  }

  static proto::JobRef Ref(const httplib::Request& req) {
    proto::JobRef ref;
    ref.set_submission_id(req.matches[1]);
    return ref;
  }

  // POST /api/jobs/ (formats.h, ParseJobSubmission) -> {"submission_id":
  // ..., "job_id": the same, as Ray answers}
  void SubmitJob(const httplib::Request& req, httplib::Response& res) {
    proto::JobSpec spec;
    std::string working_dir;
    absl::Status parsed = ParseJobSubmission(req.body, &spec, &working_dir);
    if (!parsed.ok()) return SendStatus(res, parsed);
    if (!working_dir.empty()) {
      absl::Status sent = AttachWorkingDir(*head_, working_dir, &spec);
      if (!sent.ok()) return SendStatus(res, sent);
    }
    auto job = head_->SubmitJob(spec);
    if (!job.ok()) return SendStatus(res, job.status());
    if (job->state() == proto::JobInfo::FAILED) {
      return SendError(res, 400, job->message());
    }
    const std::string& id = job->spec().submission_id();
    SendJson(
        res, 200,
        nlohmann::json{{"submission_id", id}, {"job_id", id}}.dump() + "\n");
  }

  // GET /api/jobs/{id}/logs (formats.h, JobLogQuery): a bounded window of
  // the job's output, as JSON (a character cut at the end of the window
  // is left for the next one) or as its raw bytes.
  void JobLogs(const httplib::Request& req, httplib::Response& res) {
    auto query = ParseJobLogQuery(req.params, req.get_header_value("Accept"));
    if (!query.ok()) return SendStatus(res, query.status());
    auto job = head_->GetJob(Ref(req));
    if (!job.ok()) return SendStatus(res, job.status());
    int64_t offset = JobLogStart(*query, job->log_bytes());
    proto::JobLogsRequest read;
    read.set_submission_id(job->spec().submission_id());
    read.set_offset(offset);
    std::string data;
    while (static_cast<int64_t>(data.size()) < query->limit) {
      auto part = head_->GetJobLogs(read);
      if (!part.ok()) return SendStatus(res, part.status());
      if (part->data().empty()) break;
      data += part->data();
      read.set_offset(part->next_offset());
    }
    if (static_cast<int64_t>(data.size()) > query->limit) {
      data.resize(query->limit);
    }
    int64_t size =
        std::max(job->log_bytes(), offset + static_cast<int64_t>(data.size()));
    if (query->text) {
      res.set_header("X-Shoal-Log-Offset", absl::StrCat(offset));
      res.set_header("X-Shoal-Log-Next-Offset",
                     absl::StrCat(offset + static_cast<int64_t>(data.size())));
      res.set_header("X-Shoal-Log-Size", absl::StrCat(size));
      res.status = 200;
      res.set_content(data, "text/plain");
      return;
    }
    if (query->offset < 0 && offset > 0) {  // a tail starts on a character
      size_t cut = CutUtf8Head(data);
      data.erase(0, cut);
      offset += static_cast<int64_t>(cut);
    }
    const bool ended = job->end_time_ms() > 0 &&
                       offset + static_cast<int64_t>(data.size()) >= size;
    if (!ended) data.resize(WholeUtf8Prefix(data));
    SendJson(res, 200, JobLogsJson(data, offset, size));
  }

  void AgentMetricsPage(httplib::Response& res) {
    auto channel = rpc::BlockingChannel::Connect(
        options_.agent_address, options_.token, "metrics", 5000);
    if (!channel.ok()) return SendStatus(res, channel.status());
    proto::AgentInfo info;
    absl::Status got = (*channel)->CallProto(proto::GET_AGENT_INFO,
                                             proto::Empty(), &info, 5000);
    if (!got.ok()) return SendStatus(res, got);
    proto::ServerStats rpc;
    got = (*channel)->CallProto(proto::GET_SERVER_STATS, proto::Empty(), &rpc,
                                5000);
    if (!got.ok()) return SendStatus(res, got);
    res.set_content(AgentMetrics(info, &rpc), "text/plain; version=0.0.4");
  }

  // A message as JSON, with its proto field names.
  static std::string ProtoJson(const google::protobuf::Message& message) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    if (!google::protobuf::util::MessageToJsonString(message, &out, options)
             .ok()) {
      return "{}\n";
    }
    return out + "\n";
  }

  const DashboardOptions options_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::HeadClient> head_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Start(
    const DashboardOptions& options) {
  auto dashboard = std::make_unique<DashboardImpl>(options);
  absl::Status started = dashboard->Start();
  if (!started.ok()) return started;
  return dashboard;
}

}  // namespace shoal::dashboard
