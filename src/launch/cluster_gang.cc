#include "launch/cluster_gang.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/core_runtime.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/random.h"
#include "head_client/head_client.h"
#include "launch/gang_record.h"
#include "launch/host_runner.h"
#include "rpc/rpc.h"
#include "shoal/api.h"

namespace shoal::launch {
namespace {

// Every host's runner reports here, so listen where all of them can reach:
// on loopback only when the whole gang is on loopback (one machine), else
// on this host's address in the gang, else on its primary address.
std::string ListenHost(const std::vector<proto::LaunchHost>& hosts) {
  bool loopback = true;
  for (const proto::LaunchHost& h : hosts) {
    if (!absl::StartsWith(h.address(), "127.") && h.address() != "localhost") {
      loopback = false;
    }
  }
  if (loopback) return "127.0.0.1";
  for (const proto::LaunchHost& h : hosts) {
    if (IsLocalAddress(h.address())) return h.address();
  }
  return PrimaryIpAddress();
}

void PrintOutput(std::string_view out) {
  fwrite(out.data(), 1, out.size(), stdout);
  fflush(stdout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterGang>> ClusterGang::Create(
    const LaunchOptions& options, ReservedGang gang,
    const std::atomic<bool>* interrupted) {
  std::unique_ptr<ClusterGang> g(
      new ClusterGang(options, std::move(gang), interrupted));
  auto loop = rpc::EventLoop::Create("shoal-launch");
  if (!loop.ok()) return loop.status();
  g->loop_ = std::move(*loop);
  absl::Status listening = g->Listen();
  if (!listening.ok()) return listening;
  return g;
}

ClusterGang::ClusterGang(const LaunchOptions& options, ReservedGang gang,
                         const std::atomic<bool>* interrupted)
    : options_(options),
      gang_(std::move(gang)),
      interrupted_(interrupted),
      inbox_(PrintOutput) {
  record_ = NewGangRecord(options, RandomHex(4), gang_.reservation.group.id(),
                          env::Get(env::Var::kJobSubmissionId),
                          absl::StrCat(Hostname(), " pid ", getpid()), NowMs());
}

ClusterGang::~ClusterGang() {
  if (loop_ != nullptr) {
    loop_->RunSync([&] {
      if (server_ != nullptr) server_->Shutdown();
    });
    loop_->Stop();
  }
  ReleaseGang(gang_.reservation.group);
}

absl::Status ClusterGang::Listen() {
  std::string host = ListenHost(gang_.hosts);
  absl::Status listening;
  loop_->RunSync([&] {
    auto s = rpc::Server::Create(loop_.get(), host, 0, gang_.token);
    if (!s.ok()) {
      listening = s.status();
      return;
    }
    server_ = std::move(*s);
    rpc::RegisterProto<proto::LaunchReport>(
        server_.get(), proto::LAUNCH_REPORT,
        [this](const proto::LaunchReport& r, rpc::Responder resp) {
          proto::LaunchReportReply reply;
          reply.set_stop(inbox_.Receive(r, interrupted_->load()));
          resp.Reply(reply);
        });
  });
  if (!listening.ok()) return listening;
  launcher_address_ = absl::StrCat(host, ":", server_->port());
  return absl::OkStatus();
}

int ClusterGang::StartRanks(int attempt) {
  const std::string launch_id = absl::StrCat(record_.gang_id(), "-", attempt);
  inbox_.BeginAttempt(launch_id);
  exits_.clear();
  events_.clear();
  record_.set_restarts(attempt);
  SetGangRanks(gang_.shape.rank_hosts, gang_.hosts, launch_id, &record_);
  ReportGang();
  runners_.clear();
  std::vector<proto::LaunchHostSpec> specs =
      RunnerSpecs(options_, gang_.hosts, launch_id, launcher_address_, attempt,
                  gang_.token);
  for (size_t i = 0; i < specs.size(); ++i) {
    auto task =
        Task(RunLaunchHost)
            .SetPlacementGroup(gang_.reservation.group, static_cast<int>(i))
            .SetMaxRetries(0);
    auto [kind, count] = RunnerDevices(gang_.hosts[i], gang_.choice.slice_gang,
                                       gang_.reservation.bundle);
    if (!kind.empty()) task.SetResource(kind, count);
    runners_.push_back(task.Remote(specs[i].SerializeAsString()));
  }
  ended_.assign(runners_.size(), false);
  return static_cast<int>(runners_.size());
}

void ClusterGang::StopRanks() { inbox_.RequestStop(); }

GangEvent ClusterGang::WaitForEvent(int64_t timeout_ms) {
  if (events_.empty()) {
    Wait(runners_, runners_.size(), timeout_ms);
    TakeReportedExits();
    for (size_t i = 0; i < runners_.size(); ++i) {
      if (ended_[i] ||
          !Wait(std::vector{runners_[i]}, 1, 0).not_ready.empty()) {
        continue;
      }
      ended_[i] = true;
      GangEvent ended;
      ended.kind = GangEvent::Kind::kHostEnded;
      ended.host = OutcomeOf(i);
      events_.push_back(std::move(ended));
    }
  }
  if (events_.empty()) return {};
  GangEvent next = std::move(events_.front());
  events_.pop_front();
  return next;
}

void ClusterGang::TakeReportedExits() {
  std::vector<proto::LaunchExit> exits = inbox_.TakeNewExits();
  if (exits.empty()) return;
  for (const proto::LaunchExit& e : exits) {
    exits_[e.rank()] = e;
    GangEvent reported;
    reported.kind = GangEvent::Kind::kRankExited;
    reported.rank_exit = RankExitOf(e);
    events_.push_back(std::move(reported));
  }
  SetGangExits(exits_, &record_);
  ReportGang();
}

HostOutcome ClusterGang::OutcomeOf(size_t i) {
  const proto::LaunchHost& host = gang_.hosts[i];
  HostOutcome out;
  out.host_index = static_cast<int>(i);
  out.address = host.address();
  try {
    proto::LaunchHostResult result;
    if (!result.ParseFromString(Get(runners_[i]))) {
      result.set_error(
          absl::StrCat("the runner on host ", i, " sent a malformed result"));
    }
    out.error = result.error();
    out.num_processes = result.num_processes();
    for (const proto::LaunchExit& e : result.exits()) {
      out.exits.push_back(RankExitOf(e));
    }
  } catch (const Error& e) {
    out.error = absl::StrCat("the runner on host ", i, " (", host.address(),
                             ", node ", host.node_id(), ") failed: ", e.what());
    if (dynamic_cast<const WorkerDiedError*>(&e) != nullptr) {
      out.lost_node = host.node_id();
    }
  }
  return out;
}

bool ClusterGang::StopRequested() { return interrupted_->load(); }

absl::Status ClusterGang::PlaceAgain(const std::set<std::string>& lost_nodes) {
  ReleaseGang(gang_.reservation.group);
  auto reserved =
      ReserveGang(gang_.choice, options_.reserve_timeout_s, lost_nodes);
  if (!reserved.ok()) return reserved.status();
  gang_.reservation = std::move(*reserved);
  gang_.hosts = HostsOfReservation(gang_.reservation, gang_.choice.nproc);
  record_.set_placement_group_id(gang_.reservation.group.id());
  return absl::OkStatus();
}

int64_t ClusterGang::NowUs() { return MonotonicUs(); }

void ClusterGang::SleepUs(int64_t us) { usleep(static_cast<useconds_t>(us)); }

void ClusterGang::Say(const std::string& line) {
  std::cout << line << "\n";
  std::cout.flush();
}

void ClusterGang::Finish(const LaunchOutcome& outcome) {
  for (const proto::LaunchExit& e : inbox_.TakeNewExits()) exits_[e.rank()] = e;
  SetGangExits(exits_, &record_);
  FinishGangRecord(outcome, NowMs(), &record_);
  ReportGang();
}

// Tells the head how the gang stands, for `shoal list gangs`, the dashboard
// and the metrics; a head that cannot be told is not the gang's problem
// (said once).
void ClusterGang::ReportGang() {
  absl::Status st;
  try {
    st = internal::RequireRuntime()->head().GangUpdate(record_, 2000);
  } catch (const Error& e) {
    st = absl::UnavailableError(e.what());
  }
  if (!st.ok() && !warned_head_) {
    warned_head_ = true;
    SHOAL_LOG(WARNING) << "the head does not know of this gang: " << st;
  }
}

}  // namespace shoal::launch
