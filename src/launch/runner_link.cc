#include "launch/runner_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/environment.h"
#include "head_client/head_client.h"
#include "rpc/rpc.h"

namespace shoal::launch {
namespace {

constexpr int64_t kReportTimeoutMs = 5000;
constexpr int64_t kHeadTimeoutMs = 5000;

// A port nothing listens on now, on this host.
absl::StatusOr<int> FreePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  }
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::UnavailableError("cannot find a free port on " + host);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Whether to call the head again after `st`: it is away (killed, being
// started again) and the wait for it has not run out; sleeps a little first.
class HeadOutageWait {
 public:
  HeadOutageWait() {
    give_up_us_ =
        MonotonicUs() + env::GetInt(env::Var::kHeadOutageWaitMs) * 1000;
  }
  bool Again(const absl::Status& st) const {
    if (!absl::IsUnavailable(st) || MonotonicUs() >= give_up_us_) return false;
    usleep(200000);
    return true;
  }

 private:
  int64_t give_up_us_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RunnerLink>> RunnerLink::Create(
    const proto::LaunchHostSpec& spec, const std::string& head_address,
    const std::string& token) {
  auto loop = rpc::EventLoop::Create("shoal-runner");
  if (!loop.ok()) return loop.status();
  return std::unique_ptr<RunnerLink>(
      new RunnerLink(std::move(*loop), spec, head_address, token));
}

RunnerLink::RunnerLink(std::unique_ptr<rpc::EventLoop> loop,
                       const proto::LaunchHostSpec& spec,
                       const std::string& head_address,
                       const std::string& token)
    : loop_(std::move(loop)),
      head_(std::make_unique<rpc::HeadClient>(loop_.get(), head_address, token,
                                              "runner")) {
  loop_->RunSync([&] {
    launcher_ = std::make_unique<rpc::TcpChannel>(
        loop_.get(), spec.launcher_address(), token, "runner");
  });
}

RunnerLink::~RunnerLink() {
  loop_->RunSync([&] {
    launcher_.reset();
    head_->Close();
  });
  loop_->Stop();
}

absl::StatusOr<bool> RunnerLink::Report(proto::LaunchReport* report) {
  absl::StatusOr<bool> result = rpc::RunOnLoopAndWait<absl::StatusOr<bool>>(
      loop_.get(), [&](std::function<void(absl::StatusOr<bool>)> done) {
        rpc::CallProto<proto::LaunchReportReply>(
            launcher_.get(), proto::LAUNCH_REPORT, *report,
            [done](absl::StatusOr<proto::LaunchReportReply> r) {
              if (r.ok()) {
                done(r->stop());
              } else {
                done(r.status());
              }
            },
            kReportTimeoutMs);
      });
  if (result.ok()) {
    report->clear_lines();
    report->clear_exits();
  }
  return result;
}

absl::StatusOr<int> RunnerLink::RendezvousPort(
    const proto::LaunchHostSpec& spec) {
  // Both calls may be made again (a put that overwrites, a get).
  HeadOutageWait head_away;
  std::string key = absl::StrCat("launch/", spec.launch_id(), "/port");
  if (spec.host_index() == 0) {
    absl::StatusOr<int> port = FreePort(spec.hosts(0).address());
    if (!port.ok()) return port.status();
    proto::KvPutRequest put;
    put.set_key(key);
    put.set_value(std::to_string(*port));
    put.set_overwrite(true);
    absl::StatusOr<proto::KvPutReply> reply = head_->KvPut(put, kHeadTimeoutMs);
    while (!reply.ok() && head_away.Again(reply.status())) {
      reply = head_->KvPut(put, kHeadTimeoutMs);
    }
    if (!reply.ok()) return reply.status();
    return port;
  }
  proto::KvGetRequest get;
  get.set_key(key);
  for (int i = 0; i < 600; ++i) {  // up to a minute
    absl::StatusOr<proto::KvGetReply> reply = head_->KvGet(get, kHeadTimeoutMs);
    if (!reply.ok() && head_away.Again(reply.status())) continue;
    if (!reply.ok()) return reply.status();
    int port = 0;
    if (reply->found() && absl::SimpleAtoi(reply->value(), &port)) return port;
    usleep(100000);
  }
  return absl::DeadlineExceededError(
      "host 0 of the gang never published its rendezvous port");
}

}  // namespace shoal::launch
