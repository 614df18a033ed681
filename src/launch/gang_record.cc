#include "launch/gang_record.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "launch/launch_supervisor.h"
#include "launch/launcher.h"

namespace shoal::launch {

proto::GangInfo NewGangRecord(const LaunchOptions& options,
                              const std::string& gang_id,
                              const std::string& placement_group_id,
                              const std::string& job_id,
                              const std::string& launcher, int64_t now_ms) {
  proto::GangInfo gang;
  gang.set_gang_id(gang_id);
  for (const auto& a : options.argv) gang.add_argv(ToValidUtf8(a));
  gang.set_per_host(options.per_host);
  gang.set_placement_group_id(placement_group_id);
  gang.set_max_restarts(options.max_restarts);
  gang.set_start_time_ms(now_ms);
  if (!job_id.empty()) gang.set_job_id(job_id);
  gang.set_launcher(launcher);
  return gang;
}

void SetGangRanks(const std::vector<std::pair<int, int>>& rank_hosts,
                  const std::vector<proto::LaunchHost>& hosts,
                  const std::string& launch_id, proto::GangInfo* gang) {
  gang->clear_ranks();
  for (const auto& [rank, host] : rank_hosts) {
    proto::GangRank* r = gang->add_ranks();
    r->set_rank(rank);
    r->set_host_index(host);
    r->set_node_id(hosts[host].node_id());
    r->set_address(hosts[host].address());
    r->set_log_name(absl::StrCat("launch-", launch_id, "/rank-", rank, ".log"));
  }
}

void SetGangExits(const std::map<int, proto::LaunchExit>& exits,
                  proto::GangInfo* gang) {
  for (proto::GangRank& r : *gang->mutable_ranks()) {
    auto it = exits.find(r.rank());
    if (it == exits.end()) continue;
    r.set_exited(true);
    r.set_exit_code(it->second.exit_code());
    r.set_description(it->second.description());
  }
}

void FinishGangRecord(const LaunchOutcome& outcome, int64_t now_ms,
                      proto::GangInfo* gang) {
  gang->set_state(outcome.exit_code == 0    ? proto::GangInfo::SUCCEEDED
                  : outcome.stopped_by_user ? proto::GangInfo::STOPPED
                                            : proto::GangInfo::FAILED);
  std::string message = outcome.summary;
  constexpr char kPrefix[] = "shoal launch: ";
  if (absl::StartsWith(message, kPrefix)) message.erase(0, sizeof(kPrefix) - 1);
  gang->set_message(message);
  gang->set_end_time_ms(now_ms);
}

}  // namespace shoal::launch
